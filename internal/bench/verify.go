package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// VerifyExitCode returns a Verify that runs argv once and requires exit status
// want: with a payload such as `sh -c 'exit 7'`, only a wrapper that really
// ran the payload (and passed its status on) can pass.
func VerifyExitCode(argv []string, want int) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		var exit *exec.ExitError
		if err == nil && want == 0 || errors.As(err, &exit) && exit.ExitCode() == want {
			return nil
		}
		if err == nil {
			err = errors.New("exit status 0")
		}
		return &CommandError{Argv: argv, Err: err, Want: want, Output: truncate(string(out), stderrLimit)}
	}
}

// CommandError is a command that did not exit as required. RunGroup files
// Output as the failure's stderr.
type CommandError struct {
	Argv   []string
	Err    error
	Want   int
	Output string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("%s: %v, want exit status %d", shellJoin(e.Argv), e.Err, e.Want)
}

func (e *CommandError) Unwrap() error { return e.Err }

// shellJoin renders argv as a shell would need it typed, for messages.
func shellJoin(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return !isShellSafe(r) }) {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}

func isShellSafe(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
