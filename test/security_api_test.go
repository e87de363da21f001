package test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/trident-broker/trident/conf"
)

// Issue 38, F7 and F11: the management API is no CSRF target, and its
// request bodies are bounded.

// rawRequest sends method path with body and the given headers (no
// Content-Type unless given) as guest, and returns the response.
func rawRequest(t *testing.T, base, method, path string, body io.Reader, contentLength int64, headers map[string]string, basic bool) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentLength != 0 {
		req.ContentLength = contentLength
	}
	if basic {
		req.SetBasicAuth("guest", "guest")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// evilDefinitions creates an administrator: what a cross-site form posted
// with enctype=text/plain can carry (name `{"users":[...],"x":"` and
// value `"}` make this body).
func evilDefinitions(name string) string {
	return `{"users":[{"name":"` + name + `","password_hash":"kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR","tags":"administrator"}],"x":"="}`
}

func TestSecurityF7CSRF(t *testing.T) {
	_, base := mgmtBroker(t)
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	userExists := func(name string) bool {
		code, _ := api.do("GET", "/api/users/"+name, nil)
		return code == http.StatusOK
	}

	// A form's content types, with valid credentials (as a browser that had
	// cached them would send): 415, and nothing is created.
	for i, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		name := fmt.Sprintf("evil%d", i)
		resp, body := rawRequest(t, base, "POST", "/api/definitions", strings.NewReader(evilDefinitions(name)), 0,
			map[string]string{"Content-Type": ct, "Sec-Fetch-Site": "same-origin"}, true)
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("POST /api/definitions as %s: %d %s, want 415", ct, resp.StatusCode, body)
		}
		if userExists(name) {
			t.Errorf("POST /api/definitions as %s created an administrator", ct)
		}
	}
	// A body without any Content-Type is refused as well.
	if resp, body := rawRequest(t, base, "PUT", "/api/users/evilnoct", strings.NewReader(`{"password":"x","tags":"administrator"}`), 0, nil, true); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("PUT without Content-Type: %d %s, want 415", resp.StatusCode, body)
	}
	if userExists("evilnoct") {
		t.Error("PUT without Content-Type created a user")
	}

	// JSON, but the browser says the request comes from another site: 403.
	for _, site := range []string{"cross-site", "same-site"} {
		name := "evil-" + site
		resp, body := rawRequest(t, base, "POST", "/api/definitions", strings.NewReader(evilDefinitions(name)), 0,
			map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": site}, true)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("POST /api/definitions with Sec-Fetch-Site %s: %d %s, want 403", site, resp.StatusCode, body)
		}
		if userExists(name) {
			t.Errorf("Sec-Fetch-Site %s created an administrator", site)
		}
		// A body-less DELETE from another site as well.
		api.expect(http.StatusCreated, "PUT", "/api/queues/%2F/csrf-"+site, map[string]any{"durable": true})
		if resp, body := rawRequest(t, base, "DELETE", "/api/queues/%2F/csrf-"+site, nil, 0, map[string]string{"Sec-Fetch-Site": site}, true); resp.StatusCode != http.StatusForbidden {
			t.Errorf("DELETE with Sec-Fetch-Site %s: %d %s, want 403", site, resp.StatusCode, body)
		}
	}
	// Reads from another site are not refused (a cross-site script cannot
	// read the answer without CORS, which the API does not grant).
	if resp, _ := rawRequest(t, base, "GET", "/api/overview", nil, 0, map[string]string{"Sec-Fetch-Site": "cross-site"}, true); resp.StatusCode != http.StatusOK {
		t.Errorf("GET with Sec-Fetch-Site cross-site: %d", resp.StatusCode)
	}

	// 401s carry no Basic challenge, so a browser never prompts nor caches
	// credentials: no credentials, wrong ones, a state-changing request.
	for _, c := range []struct {
		method, path string
		creds        bool
	}{{"GET", "/api/overview", false}, {"GET", "/api/whoami", false}, {"PUT", "/api/vhosts/x", false}} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without credentials: %d, want 401", c.method, c.path, resp.StatusCode)
		}
		if h := resp.Header.Values("WWW-Authenticate"); len(h) != 0 {
			t.Errorf("%s %s: 401 with WWW-Authenticate %q", c.method, c.path, h)
		}
	}
	req, _ := http.NewRequest("GET", base+"/api/overview", nil)
	req.SetBasicAuth("guest", "wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Header.Values("WWW-Authenticate")) != 0 {
		t.Errorf("wrong password: %d with WWW-Authenticate %q", resp.StatusCode, resp.Header.Values("WWW-Authenticate"))
	}

	// The legitimate ways still work: JSON from the same origin (the UI),
	// JSON with a charset, JSON with no Sec-Fetch-Site (tools), a body-less
	// DELETE without Content-Type (rabbitmqadmin).
	resp, body := rawRequest(t, base, "POST", "/api/definitions", strings.NewReader(evilDefinitions("okadmin")), 0,
		map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"}, true)
	if resp.StatusCode != http.StatusNoContent || !userExists("okadmin") {
		t.Fatalf("same-origin JSON import: %d %s", resp.StatusCode, body)
	}
	resp, body = rawRequest(t, base, "PUT", "/api/users/okuser", strings.NewReader(`{"password":"p","tags":""}`), 0,
		map[string]string{"Content-Type": "application/json; charset=utf-8"}, true)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT with application/json; charset=utf-8: %d %s", resp.StatusCode, body)
	}
	if resp, body = rawRequest(t, base, "DELETE", "/api/users/okuser", nil, 0, nil, true); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("body-less DELETE without Content-Type: %d %s", resp.StatusCode, body)
	}
}

// definitionsBody is a definitions file of about size bytes whose bulk
// (parameters of a component the import ignores) costs memory to parse.
func definitionsBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"users":[],"parameters":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"component":"other","vhost":"/","name":"p%d","value":{"k":"%s"}}`, i, strings.Repeat("v", 400))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// padReader is a JSON object of n bytes, made as it is read.
func padReader(n int64) io.Reader {
	return io.MultiReader(strings.NewReader(`{"x":"`), io.LimitReader(repeatByte('a'), n-8), strings.NewReader(`"}`))
}

type repeatByte byte

func (b repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

func TestSecurityF11BodyLimit(t *testing.T) {
	const defsLimit = 8 << 20
	_, base := mgmtBroker(t, func(c *conf.Config) { c.HTTP.MaxDefinitionsBody = defsLimit })
	api := apiClient{t: t, base: base, user: "guest", pass: "guest"}
	jsonCT := map[string]string{"Content-Type": "application/json"}

	// A 2 MiB body to an ordinary endpoint: 413, with a Content-Length and
	// chunked, and the queue is not declared.
	big := `{"durable":true,"arguments":{"x-pad":"` + strings.Repeat("a", 2<<20) + `"}}`
	resp, body := rawRequest(t, base, "PUT", "/api/queues/%2F/bigq", strings.NewReader(big), 0, jsonCT, true)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("PUT 2 MiB with Content-Length: %d %s, want 413", resp.StatusCode, body)
	}
	resp, body = rawRequest(t, base, "PUT", "/api/queues/%2F/bigq", io.MultiReader(strings.NewReader(big)), -1, jsonCT, true)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("PUT 2 MiB chunked: %d %s, want 413", resp.StatusCode, body)
	}
	if code, _ := api.do("GET", "/api/queues/%2F/bigq", nil); code != http.StatusNotFound {
		t.Fatalf("the queue of a refused body exists: %d", code)
	}
	// Just under the limit still works.
	api.expect(http.StatusCreated, "PUT", "/api/queues/%2F/okq", `{"durable":true,"arguments":{"x-pad":"`+strings.Repeat("a", 900<<10)+`"}}`)

	// Definitions past their limit: 413 before the body is read.
	resp, body = rawRequest(t, base, "POST", "/api/definitions", padReader(defsLimit+1<<20), defsLimit+1<<20, jsonCT, true)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("definitions past the limit: %d %s, want 413", resp.StatusCode, body)
	}

	// Four imports just under the limit at once, and four far past it:
	// the heap grows by what one import costs, not four (imports run one
	// at a time; bodies past the limit are never read).
	under := definitionsBody(defsLimit - 64<<10)
	const huge = 48 << 20
	// A tight GC target, so that the peak measures what the imports hold
	// rather than how much garbage the collector lets pile up.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	grow := secHeapPeak()
	var wg sync.WaitGroup
	var ok, refused atomic.Int32
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if resp, _ := rawRequest(t, base, "POST", "/api/definitions", bytes.NewReader(under), 0, jsonCT, true); resp.StatusCode == http.StatusNoContent {
				ok.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			if resp, _ := rawRequest(t, base, "POST", "/api/definitions", padReader(huge), huge, jsonCT, true); resp.StatusCode == http.StatusRequestEntityTooLarge {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	grew := grow()
	if ok.Load() != 4 || refused.Load() != 4 {
		t.Fatalf("%d of 4 imports under the limit done, %d of 4 past it refused", ok.Load(), refused.Load())
	}
	// The test's own body (8 MiB, shared) was allocated before the sampling.
	t.Logf("heap: peak +%d MiB for 4 concurrent %d MiB imports", grew>>20, len(under)>>20)
	if limit := int64(8 * defsLimit); grew > limit {
		t.Fatalf("4 concurrent imports of %d MiB grew the heap by %d MiB (bound %d MiB)", len(under)>>20, grew>>20, limit>>20)
	}
}
