package client

import (
	"context"
	"encoding/base64"
	"encoding/json"

	"github.com/tine-run/tine/api"
)

// Anthropic runs one computer tool_use input (computer_20250124 or
// computer_20251124) as the model emitted it, in coordinates of a screen
// of scale (nil: the real screen), and returns what the tool result
// carries: the screenshot (at that scale) or, for cursor_position, the
// reply's Output text. AnthropicToolResult builds the tool_result block.
func (a *ACI) Anthropic(ctx context.Context, input json.RawMessage, scale *[2]int) (*api.ACIReply, []byte, error) {
	return a.Do(ctx, &api.ACIRequest{Op: "anthropic", Input: input, Scale: scale})
}

// OpenAI runs a computer_call's action — one action object, an array of
// them, or the whole computer_call ({action} or {actions}) — and returns
// the screenshot its computer_call_output carries (OpenAIComputerCallOutput).
func (a *ACI) OpenAI(ctx context.Context, action json.RawMessage, scale *[2]int) (*api.ACIReply, []byte, error) {
	return a.Do(ctx, &api.ACIRequest{Op: "openai", Input: action, Scale: scale})
}

// AnthropicToolResult is the tool_result content block answering the
// tool_use toolUseID with an Anthropic reply.
func AnthropicToolResult(toolUseID string, rep *api.ACIReply, img []byte, err error) map[string]any {
	block := map[string]any{"type": "tool_result", "tool_use_id": toolUseID}
	switch {
	case err != nil:
		block["is_error"], block["content"] = true, err.Error()
	case img != nil:
		block["content"] = []any{map[string]any{"type": "image", "source": map[string]any{
			"type": "base64", "media_type": "image/" + rep.Format, "data": base64.StdEncoding.EncodeToString(img)}}}
	default:
		block["content"] = rep.Output
	}
	return block
}

// OpenAIComputerCallOutput is the computer_call_output item answering the
// call callID with its screenshot.
func OpenAIComputerCallOutput(callID string, rep *api.ACIReply, img []byte) map[string]any {
	return map[string]any{"type": "computer_call_output", "call_id": callID, "output": map[string]any{
		"type": "computer_screenshot", "image_url": "data:image/" + rep.Format + ";base64," + base64.StdEncoding.EncodeToString(img)}}
}

// RecordStart starts filming the desktop into an mp4 at fps frames a
// second (0: 15).
func (a *ACI) RecordStart(ctx context.Context, fps int) error {
	return a.do(ctx, api.ACIRequest{Op: "record_start", FPS: fps, Format: "mp4"})
}

// RecordStop ends the recording and returns the mp4.
func (a *ACI) RecordStop(ctx context.Context) (*api.ACIReply, []byte, error) {
	return a.Do(ctx, &api.ACIRequest{Op: "record_stop"})
}

// RecommendedScale is the screen size Anthropic's reference implementation
// shows the model for a width×height screen: XGA 1024×768, WXGA 1280×800 or
// FWXGA 1366×768, the first whose aspect ratio is within 0.02 of the
// screen's and which is smaller than it; nil (the real screen) when none
// is. Pass it as the scale of Anthropic and OpenAI.
func RecommendedScale(width, height int) *[2]int {
	ratio := float64(width) / float64(height)
	for _, t := range [][2]int{{1024, 768}, {1280, 800}, {1366, 768}} {
		if r := float64(t[0]) / float64(t[1]); r-ratio < 0.02 && ratio-r < 0.02 && t[0] < width {
			return &t
		}
	}
	return nil
}
