// Package ui is Trident's management web UI: a single page of plain
// JavaScript and CSS, embedded in the binary, that talks to the management
// HTTP API (RabbitMQ's /api shapes) with the HTTP basic credentials the user
// logs in with, or an OAuth 2 access token. It needs no network access
// beyond the broker itself (and, for an OAuth 2 login, the provider's token
// endpoint) and no build step: the files under static/ are served as they
// are.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// Handler serves the UI: "/" is the application, the other paths are its
// static files. Paths under /api/ that reach it (an endpoint the API does not
// have) get the API's JSON 404, so that the UI can show a readable error.
func Handler() http.Handler { return HandlerConnecting(nil) }

// HandlerConnecting is Handler whose pages may also fetch from the origins
// connect returns (the OAuth 2 provider's token endpoint), which the
// Content-Security-Policy otherwise forbids. connect may be nil.
func HandlerConnecting(connect func() []string) http.Handler {
	static, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	fileServer := http.FileServerFS(static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api" || strings.HasPrefix(r.URL.Path, "/api/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"Object Not Found","reason":"Not Found"}` + "\n"))
			return
		}
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		csp := "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; frame-ancestors 'none'"
		if connect != nil {
			if origins := connect(); len(origins) > 0 {
				csp += "; connect-src 'self' " + strings.Join(origins, " ")
			}
		}
		h.Set("Content-Security-Policy", csp)
		// Small files, revalidated each time: an upgraded binary serves its
		// own UI at once.
		h.Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	})
}
