package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrMalformed is wrapped by every decoding error of this package.
var ErrMalformed = errors.New("malformed value")

// FieldError says which annotation key and which field of its payload was
// wrong, and what was expected there.
type FieldError struct {
	Key      string // annotation key or file name
	Field    string // JSON path of the field, e.g. "gpus[2].memoryMiB"
	Expected string // what a valid value looks like
	Got      string // what was found (may be empty)
}

func (e *FieldError) Error() string {
	msg := e.Key
	if e.Field != "" {
		msg += ": field " + e.Field
	}
	msg += ": expected " + e.Expected
	if e.Got != "" {
		msg += ", got " + e.Got
	}
	return msg
}

func (e *FieldError) Unwrap() error { return ErrMalformed }

func fieldErr(key, field, expected string, got any) error {
	g := ""
	if got != nil {
		g = fmt.Sprint(got)
		if len(g) > 64 {
			g = g[:64] + "…"
		}
	}
	return &FieldError{Key: key, Field: field, Expected: expected, Got: g}
}

// decodeStrict decodes one JSON object into out, rejecting unknown fields
// and trailing data, and turns encoding/json's errors into FieldErrors.
func decodeStrict(key, value string, out any) error {
	if value == "" {
		return fieldErr(key, "", "a JSON object", "an empty string")
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return fieldErr(key, typeErr.Field, "a JSON "+typeErr.Type.String(), "a JSON "+typeErr.Value)
		default:
			return fieldErr(key, "", "a valid JSON object", err.Error())
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return fieldErr(key, "", "a single JSON object", "trailing data")
	}
	return nil
}

func checkVersion(key, got string) error {
	if got != Version {
		return fieldErr(key, "version", fmt.Sprintf("%q (this build reads only %s; upgrade the component that wrote it or this one)", Version, Version), fmt.Sprintf("%q", got))
	}
	return nil
}
