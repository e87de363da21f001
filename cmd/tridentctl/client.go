package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// client talks to the management API.
type client struct {
	base, user, pass string
	token            string // OAuth 2 access token: sent as Bearer instead of user and password
	http             *http.Client
}

// authorize sets the request's credentials.
func (c *client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
		return
	}
	req.SetBasicAuth(c.user, c.pass)
}

// apiError is an error answer of the API.
type apiError struct {
	Status int
	Error_ string `json:"error"`
	Reason any    `json:"reason"`
}

func (e *apiError) Error() string {
	if e.Error_ == "" {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return fmt.Sprintf("HTTP %d: %s: %v", e.Status, e.Error_, e.Reason)
}

// do sends a request; body is JSON-encoded unless it is a []byte. hdr
// holds extra header pairs.
func (c *client) do(method, path string, body any, hdr ...string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		if b, ok := body.([]byte); ok {
			rd = bytes.NewReader(b)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, err
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("%s %s: answer larger than %d MiB", method, path, maxAnswer>>20)
	}
	if resp.StatusCode >= 400 {
		e := &apiError{Status: resp.StatusCode}
		_ = json.Unmarshal(data, e)
		return nil, e
	}
	return data, nil
}

// maxAnswer bounds what tridentctl reads of one API answer.
const maxAnswer = 256 << 20

func esc(s string) string { return url.PathEscape(s) }

// object names what a request is about, for errors: "queue 'q' in vhost
// '/'", "user 'ann'".
type object struct {
	kind, name string
	vhost      string // "" for objects outside vhosts
}

func (o object) String() string {
	s := fmt.Sprintf("%s '%s'", o.kind, o.name)
	if o.vhost != "" {
		s += fmt.Sprintf(" in vhost '%s'", o.vhost)
	}
	return s
}

// call is do for a request about obj: a 404 (or the publish endpoint's
// 400 "404 NOT_FOUND - ...") becomes "<obj> not found", or "vhost 'v' not
// found" when the vhost is what is missing; any other
// refusal "<obj>: HTTP <code>: <error>: <reason>".
func (cmd *command) call(obj object, method, path string, body any, hdr ...string) ([]byte, error) {
	data, err := cmd.c.do(method, path, body, hdr...)
	var ae *apiError
	if err == nil || !errors.As(err, &ae) {
		return data, err
	}
	reason, _ := ae.Reason.(string)
	if ae.Status == http.StatusNotFound || strings.HasPrefix(reason, "404 NOT_FOUND") {
		if obj.vhost != "" && !cmd.vhostExists(obj.vhost) {
			return nil, fmt.Errorf("vhost '%s' not found", obj.vhost)
		}
		return nil, fmt.Errorf("%s not found", obj)
	}
	return nil, fmt.Errorf("%s: %w", obj, err)
}

// vhostExists reports whether vhost is known; true when the API cannot
// tell (so the error names the object asked for).
func (cmd *command) vhostExists(vhost string) bool {
	_, err := cmd.c.do("GET", "/api/vhosts/"+esc(vhost), nil)
	var ae *apiError
	return !(errors.As(err, &ae) && ae.Status == http.StatusNotFound)
}
