package e2b

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"

	"github.com/tine-run/tine/api"
)

// E2B's network settings mapped onto tine's sandbox networking
// (docs/network.md): allow_internet_access and network.allowOut/denyOut
// make an egress sandbox under that policy, allow_internet_access false a
// loopback one. A create that says nothing gets tine's default, loopback
// (E2B's server defaults to internet access; the v2 SDK sends the field
// only when the caller sets it, e2b 2.50 always sends true).

// networkJSON is the part of E2B's network object tine honours.
type networkJSON struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

// catchAll is how E2B says "everything": next to allowOut it is what tine
// does anyway (with any allow rule, only what one names passes).
const catchAll = "0.0.0.0/0"

// networkOf is the tine network an E2B create (or network update) asks
// for. The fields tine cannot honour are refused by name.
func networkOf(internet *bool, raw map[string]any) (mode string, policy api.NetworkPolicy, err error) {
	var unknown []string
	for k := range raw {
		if k != "allowOut" && k != "denyOut" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return "", policy, errorf(http.StatusBadRequest, "network.%s is not supported by tine's E2B API (tine honours allowOut and denyOut); leave it out", unknown[0])
	}
	var n networkJSON
	if len(raw) > 0 {
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &n); err != nil {
			return "", policy, errorf(http.StatusBadRequest, "network: allowOut and denyOut are lists of strings: %v", err)
		}
	}
	if len(n.AllowOut) > 0 {
		// E2B lets allowOut win over denyOut; tine checks deny first. Only
		// the catch-all, which an allow list implies, keeps its meaning.
		for _, d := range n.DenyOut {
			if d != catchAll {
				return "", policy, errorf(http.StatusBadRequest, "network.denyOut %q next to allowOut: tine refuses what is denied even when allowed (E2B lets allowOut win), so give allowOut alone (everything else is refused) or denyOut alone", d)
			}
		}
		policy.Allow = n.AllowOut
	} else {
		policy.Deny = n.DenyOut
	}
	switch {
	case internet != nil && !*internet:
		if len(n.AllowOut) > 0 {
			return "", policy, errorf(http.StatusBadRequest, "allow_internet_access false with network.allowOut: give one of them")
		}
		return "loopback", api.NetworkPolicy{}, nil
	case internet != nil && *internet, len(n.AllowOut) > 0, len(n.DenyOut) > 0:
		if slices.Contains(policy.Deny, catchAll) {
			return "loopback", api.NetworkPolicy{}, nil // nothing out at all
		}
		return "egress", policy, nil
	}
	return "", policy, nil
}

// handleNetwork is updateNetwork (PUT /sandboxes/{id}/network): the egress
// policy of a live egress sandbox, replaced at once (tine's live change).
// A loopback sandbox cannot get an interface while it runs.
func (s *Server) handleNetwork(w http.ResponseWriter, r *http.Request) error {
	b, err := s.lookup(r.PathValue("id"))
	if err != nil {
		return err
	}
	var raw map[string]any
	if err := decode(r, &raw); err != nil {
		return err
	}
	var internet *bool
	if v, ok := raw["allow_internet_access"]; ok {
		on, isBool := v.(bool)
		if !isBool {
			return errorf(http.StatusBadRequest, "allow_internet_access %v: want true or false", v)
		}
		internet = &on
		delete(raw, "allow_internet_access")
	}
	mode, policy, err := networkOf(internet, raw)
	if err != nil {
		return err
	}
	tineID, _, err := s.running(r.Context(), b)
	if err != nil {
		return err
	}
	sb, err := s.cfg.Client.Get(r.Context(), tineID)
	if err != nil {
		return err
	}
	if sb.Spec.Network != "egress" {
		if mode == "egress" {
			return errorf(http.StatusBadRequest, "sandbox %q was created without internet access, and tine cannot give a running sandbox an interface: create it with allowInternetAccess: true (or network rules)", b.id)
		}
		w.WriteHeader(http.StatusNoContent) // already has nothing out
		return nil
	}
	if mode == "loopback" {
		policy = api.NetworkPolicy{Deny: []string{catchAll}} // nothing out
	}
	if _, err := s.cfg.Client.SetNetwork(r.Context(), tineID, policy); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
