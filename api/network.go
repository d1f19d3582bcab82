package api

// Port publishes a port of a sandbox on the host: connections to
// HostIP:HostPort reach the sandbox's Port.
type Port struct {
	// HostIP is the host address to listen on (default 127.0.0.1; 0.0.0.0
	// for every address, which reaches beyond the host).
	HostIP string `json:"host_ip,omitempty"`
	// HostPort is the host port (0: one the kernel picks, shown in
	// Sandbox.Network.Ports).
	HostPort int `json:"host_port,omitempty"`
	// Port is the sandbox's port.
	Port int `json:"port"`
	// Protocol is "tcp" (the default) or "udp".
	Protocol string `json:"protocol,omitempty"`
	// Proxy publishes the TCP port through the daemon's TCP listener
	// instead of a host port: requests there with the header
	// "Tine-Port: ID:PORT" (and the token) reach it. HostIP and HostPort
	// are then unused.
	Proxy bool `json:"proxy,omitempty"`
}

// NetworkPolicy is an egress sandbox's policy, the body of PUT
// /v1/sandboxes/{id}/network. Each rule is HOST, *.DOMAIN, ADDRESS or
// CIDR, with an optional :PORT; with any allow rule, everything else is
// refused.
type NetworkPolicy struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Network is a sandbox's network as it is now (Sandbox.Network, and the
// answer to PUT /v1/sandboxes/{id}/network).
type Network struct {
	// Mode is "none", "loopback" or "egress".
	Mode string `json:"mode"`
	// Address is an egress sandbox's IPv4 address.
	Address string `json:"address,omitempty"`
	// Resolver is the address of the DNS resolver an egress sandbox uses.
	Resolver string `json:"resolver,omitempty"`
	NetworkPolicy
	// Ports are the published ports, with the host ports bound.
	Ports []Port `json:"ports,omitempty"`
}

// Injection adds headers to an egress sandbox's plain-HTTP requests for
// Host through tine's proxy (the sandbox gets http_proxy), so a secret
// never enters the sandbox. With TLS the proxy sends the request on over
// HTTPS: the sandbox asks for http://HOST/... Values are never shown
// back (inspect says Redacted).
type Injection struct {
	Host    string            `json:"host"`
	Headers map[string]string `json:"headers"`
	TLS     bool              `json:"tls,omitempty"`
}

// Redacted replaces injected header values wherever the API shows a spec.
const Redacted = "<redacted>"
