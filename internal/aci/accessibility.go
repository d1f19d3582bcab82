package aci

import (
	"context"

	"github.com/tine-run/tine/api"
	"github.com/tine-run/tine/internal/desktop/a11y"
)

// accessibility answers with the desktop's accessibility tree: compact
// JSON (filtered to visible or interactive nodes if asked) or OSWorld's
// XML.
func (ss *session) accessibility(ctx context.Context, req *api.ACIRequest, rep *api.ACIReply) error {
	if ss.s.A11y == nil {
		return bad("this desktop has no accessibility bus: create it with \"a11y\": true (or \"osworld\": true)")
	}
	if req.Format != "" && req.Format != "json" && req.Format != "xml" {
		return bad("accessibility format %q: want json or xml", req.Format)
	}
	if req.Format == "xml" && req.Filter != "" {
		return bad("accessibility: the xml form is OSWorld's whole tree; filter applies to json")
	}
	apps, err := ss.s.A11y(ctx)
	if err != nil {
		return err
	}
	if req.Format == "xml" {
		rep.XML = a11y.XML(apps)
		return nil
	}
	tree, err := a11y.CompactTree(apps, req.Filter)
	if err != nil {
		return bad("%v", err)
	}
	rep.Tree = tree
	return nil
}
