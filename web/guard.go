package web

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// The rules every /api/ request passes before its handler (guard), so that
// the API is no CSRF target and no body costs more than its limit:
//
//   - A state-changing request (anything but GET, HEAD, OPTIONS) that a
//     browser marks as coming from another site or origin (Sec-Fetch-Site
//     other than same-origin or none) is refused with 403.
//   - A state-changing request with a body, or with a Content-Type, must be
//     Content-Type application/json (415 otherwise): an HTML form can send
//     only text/plain, multipart/form-data or urlencoded, and a cross-site
//     script can send JSON only after a CORS preflight, which the API never
//     grants. A DELETE or POST without a body and without a Content-Type
//     passes (rabbitmqadmin sends none).
//   - Every body is read through a limit: maxBody (1 MiB), or the
//     definitions limit for POST /api/definitions[/vhost]. A Content-Length
//     past it is answered 413 before anything is read; a chunked body that
//     goes past it stops there, and the handler's answer becomes 413.
//   - 401 answers carry no Basic challenge (authed), so a browser never
//     shows its own login prompt nor caches credentials that a cross-site
//     request would then carry; the UI has its own login form.

// maxBody bounds an API request body, definitions imports aside.
const maxBody = 1 << 20

// DefaultMaxDefinitionsBody bounds a definitions import's body when
// Options.MaxDefinitionsBody is zero.
const DefaultMaxDefinitionsBody = 64 << 20

func isAPIPath(p string) bool { return p == "/api" || strings.HasPrefix(p, "/api/") }

func changesState(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// isDefinitionsImport reports whether r is POST /api/definitions or POST
// /api/definitions/{vhost}.
func isDefinitionsImport(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/definitions")
	return ok && (rest == "" || (strings.HasPrefix(rest, "/") && !strings.Contains(rest[1:], "/")))
}

// bodyLimit is the body limit of r.
func (s *Server) bodyLimit(r *http.Request) int64 {
	if isDefinitionsImport(r) {
		return s.maxDefsBody
	}
	return maxBody
}

// guard applies the rules above to an /api/ request. It returns the writer
// and request the handler gets, or ok false when it answered itself.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, bool) {
	hasBody := r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
	if changesState(r.Method) {
		switch site := r.Header.Get("Sec-Fetch-Site"); site {
		case "", "same-origin", "none":
		default:
			writeError(w, http.StatusForbidden, "forbidden", "cross-site requests that change state are refused (Sec-Fetch-Site: "+site+")")
			return nil, nil, false
		}
		ct := r.Header.Get("Content-Type")
		if hasBody || ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "requests that change state take Content-Type: application/json")
				return nil, nil, false
			}
		}
	}
	if !hasBody {
		return w, r, true
	}
	limit := s.bodyLimit(r)
	if r.ContentLength > limit {
		// Not read at all; the connection closes rather than drain it.
		w.Header().Set("Connection", "close")
		tooLarge(w, limit)
		return nil, nil, false
	}
	lb := &limitedBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit)}
	r.Body = lb
	return &limitWriter{ResponseWriter: w, body: lb, limit: limit}, r, true
}

func tooLarge(w http.ResponseWriter, limit int64) {
	writeError(w, http.StatusRequestEntityTooLarge, "request_entity_too_large",
		"the request body is larger than the limit of "+formatBytes(limit))
}

func formatBytes(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// limitedBody notes that the body went past its limit.
type limitedBody struct {
	io.ReadCloser
	over bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		b.over = true
	}
	return n, err
}

// limitWriter turns a handler's answer into 413 once the body went past its
// limit (the handler saw a read error and answered 400 or 500).
type limitWriter struct {
	http.ResponseWriter
	body    *limitedBody
	limit   int64
	wrote   bool
	discard bool // the handler's own body, replaced by the 413's
}

func (lw *limitWriter) WriteHeader(code int) {
	if lw.wrote {
		return
	}
	lw.wrote = true
	if lw.body.over && code >= 400 {
		h := lw.ResponseWriter.Header()
		h.Del("Content-Length")
		tooLarge(lw.ResponseWriter, lw.limit)
		lw.discard = true
		return
	}
	lw.ResponseWriter.WriteHeader(code)
}

func (lw *limitWriter) Write(p []byte) (int, error) {
	if !lw.wrote {
		lw.WriteHeader(http.StatusOK)
	}
	if lw.discard {
		return len(p), nil
	}
	return lw.ResponseWriter.Write(p)
}

func (lw *limitWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }
