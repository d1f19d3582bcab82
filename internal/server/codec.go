package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// decodeJSON reads r's body, at most limit bytes, into v. Unknown fields,
// trailing data and malformed JSON are ErrInvalidArgument, with a message
// that names the field or the offset; an oversized body is a
// *http.MaxBytesError (413).
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body := http.MaxBytesReader(w, r.Body, limit)
	return decodeStrict(body, v)
}

// decodeStrict decodes exactly one JSON value from rd into v.
func decodeStrict(rd io.Reader, v any) error {
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: request body has data after the JSON value", ErrInvalidArgument)
	}
	return nil
}

// jsonError turns a decoder error into a message a client can act on.
func jsonError(err error) error {
	var (
		syntax    *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		maxBytes  *http.MaxBytesError
		unknownOK = strings.HasPrefix(err.Error(), "json: unknown field ")
	)
	switch {
	case errors.As(err, &maxBytes):
		return err
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: request body is empty; send a JSON object", ErrInvalidArgument)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: request body ends inside the JSON value", ErrInvalidArgument)
	case errors.As(err, &syntax):
		return fmt.Errorf("%w: malformed JSON at byte %d: %v", ErrInvalidArgument, syntax.Offset, err)
	case errors.As(err, &typeErr):
		return fmt.Errorf("%w: field %q: got JSON %s, want %s", ErrInvalidArgument, typeErr.Field, typeErr.Value, typeErr.Type)
	case unknownOK:
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return fmt.Errorf("%w: unknown field %s", ErrInvalidArgument, field)
	}
	return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.Encode(v)
}
