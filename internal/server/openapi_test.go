package server

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// parseOpenAPIPaths lists "METHOD /path" for every operation of an
// OpenAPI document.
func parseOpenAPIPaths(doc []byte) ([]string, error) {
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("parse api/openapi.yaml: %w", err)
	}
	var ops []string
	for path, item := range spec.Paths {
		for key := range item {
			switch key {
			case "get", "put", "post", "delete", "patch", "head", "options":
				ops = append(ops, strings.ToUpper(key)+" "+path)
			}
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("api/openapi.yaml has no operations")
	}
	return ops, nil
}
