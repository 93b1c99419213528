package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// apiError is an error as OpenAI's API returns it: a status code and
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

// apiErr is an error of the request itself (invalid_request_error) unless
// the status says otherwise.
func apiErr(status int, param, code, format string, args ...any) *apiError {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	return &apiError{Status: status, Type: typ, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// badParam is a 400 naming the parameter.
func badParam(param, format string, args ...any) *apiError {
	return apiErr(http.StatusBadRequest, param, "invalid_value", format, args...)
}

// errorBody is the JSON body of e, param and code null when unset, as
// OpenAI's are.
func errorBody(e *apiError) map[string]any {
	var param, code any
	if e.Param != "" {
		param = e.Param
	}
	if e.Code != "" {
		code = e.Code
	}
	return map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "param": param, "code": code}}
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == 499 { // the client is gone: nothing to answer
		return
	}
	writeJSON(w, e.Status, errorBody(e))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// decodeStrict reads one JSON object into v: an unknown field, a wrong
// type or trailing data is a 400 naming the parameter. OpenAI's API refuses
// unknown fields too ("Unrecognized request argument"); its clients send
// only what the caller set.
func decodeStrict(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return apiErr(http.StatusBadRequest, "", "invalid_json", "the request body is empty: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			return apiErr(http.StatusBadRequest, "", "invalid_json", "the request body has data after its JSON object")
		}
		return nil
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		param := strings.TrimPrefix(typeErr.Field, "params.") // the embedded struct's fields are the request's
		if param == "" {
			return apiErr(http.StatusBadRequest, "", "invalid_json", "the request body must be a JSON object, not %s", typeErr.Value)
		}
		return apiErr(http.StatusBadRequest, param, "invalid_type", "%s: want %s, got %s", param, typeName(typeErr.Type.String()), typeErr.Value)
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return apiErr(http.StatusBadRequest, "", "invalid_json", "the request body is not valid JSON: %v", strings.TrimPrefix(err.Error(), "json: "))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return apiErr(http.StatusBadRequest, name, "unknown_parameter", "Unrecognized request argument supplied: %s", name)
	}
	return apiErr(http.StatusBadRequest, "", "invalid_json", "the request body: %v", strings.TrimPrefix(err.Error(), "json: "))
}

// typeName says a Go type as a JSON type.
func typeName(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case strings.Contains(goType, "float"):
		return "a number"
	case goType == "bool" || goType == "*bool":
		return "a boolean"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.HasPrefix(goType, "[]") || strings.HasPrefix(goType, "*["):
		return "an array"
	}
	return "an object"
}
