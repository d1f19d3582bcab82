package api

import _ "embed"

// OpenAPI is api/openapi.yaml, the specification of every route.
//
//go:embed openapi.yaml
var OpenAPI []byte
