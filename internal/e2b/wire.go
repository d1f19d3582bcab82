package e2b

import "time"

// The control plane's JSON, field names as E2B's OpenAPI spec spells them
// and the SDKs read them.

// newSandbox is the body of POST /sandboxes (NewSandbox) and
// POST /v2/sandboxes (NewSandboxV2, without secure).
type newSandbox struct {
	TemplateID      string            `json:"templateID"`
	Timeout         *int64            `json:"timeout,omitempty"`
	AutoPause       bool              `json:"autoPause,omitempty"`
	AutoPauseMemory *bool             `json:"autoPauseMemory,omitempty"`
	AutoResume      *autoResume       `json:"autoResume,omitempty"`
	Secure          *bool             `json:"secure,omitempty"`
	AllowInternet   *bool             `json:"allow_internet_access,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	EnvVars         map[string]string `json:"envVars,omitempty"`
	// Network's allowOut and denyOut become the egress policy
	// (network.go); its other fields are refused by name.
	Network map[string]any `json:"network,omitempty"`
	// Fields tine accepts and cannot honour are refused by name (see
	// create): MCP gateway, IAM, volumes.
	MCP          map[string]any `json:"mcp,omitempty"`
	IAM          map[string]any `json:"iam,omitempty"`
	VolumeMounts []any          `json:"volumeMounts,omitempty"`
}

type autoResume struct {
	Enabled bool `json:"enabled"`
}

// sandboxJSON is the Sandbox schema: the answer to create, connect and fork.
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandbox is ListedSandbox; sandboxDetail adds what GET /sandboxes/{id}
// returns.
type listedSandbox struct {
	SandboxID    string            `json:"sandboxID"`
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []any             `json:"volumeMounts"`
}

type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string    `json:"envdAccessToken,omitempty"`
	Domain              *string   `json:"domain"`
	AllowInternetAccess bool      `json:"allowInternetAccess"`
	Lifecycle           lifecycle `json:"lifecycle"`
}

type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

type timeoutBody struct {
	Timeout int64 `json:"timeout"`
}

type connectBody struct {
	Timeout *int64 `json:"timeout,omitempty"`
	Memory  *bool  `json:"memory,omitempty"`
}

type pauseBody struct {
	Memory *bool `json:"memory,omitempty"`
}

type forkBody struct {
	Timeout *int64 `json:"timeout,omitempty"`
	Count   *int   `json:"count,omitempty"`
}

type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

type snapshotBody struct {
	Name string `json:"name,omitempty"`
}

type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// apiError is every error body: the SDKs read code (not the HTTP status)
// to tell 404 and 409 apart.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Message }
