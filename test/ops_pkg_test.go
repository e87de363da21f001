package test

// Issue 39, packaging: --version on both binaries (stamped by make, or
// from the VCS stamp), the start-up log and /api/overview's
// product_version; `trident healthcheck`; the Dockerfile and, where podman
// is installed, the image it builds; deploy/compose.yaml with the files
// deploy/gen-certs.sh makes, run as three real processes; the systemd
// unit; the LICENSE.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.yaml.in/yaml/v3"

	"github.com/trident-broker/trident/cluster/cookie"
	"github.com/trident-broker/trident/conf"
	"github.com/trident-broker/trident/test/testbin"
)

// pkgRoot is the module's root directory.
func pkgRoot(t testing.TB) string {
	t.Helper()
	root, err := testbin.FindModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// pkgEnv is the environment for make and go: this process's, without make's
// own variables (the test may run under `make test`) and without TRIDENT_*.
func pkgEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "MAKEFLAGS" || k == "MFLAGS" || k == "MAKELEVEL" || strings.HasPrefix(k, "TRIDENT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// pkgRun runs a command in the module root and returns its combined output.
func pkgRun(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = pkgRoot(t)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// pkgMake runs `make TARGET BIN=dir` into a directory of the test's.
func pkgMake(t testing.TB, target string) string {
	t.Helper()
	dir := t.TempDir()
	pkgRun(t, pkgEnv(), "make", "--no-print-directory", target, "BIN="+dir)
	return dir
}

// wantVersion is what make stamps: `git describe` without its "v", and the
// abbreviated commit.
func wantVersion(t testing.TB) (ver, commit string) {
	t.Helper()
	ver = strings.TrimPrefix(pkgRun(t, pkgEnv(), "git", "describe", "--tags", "--always", "--dirty"), "v")
	commit = pkgRun(t, pkgEnv(), "git", "rev-parse", "--short=7", "HEAD")
	return ver, commit
}

// exitCode runs cmd and returns its exit code and output.
func exitCode(t testing.TB, cmd *exec.Cmd) (int, string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("%v: %v", cmd.Args, err)
	return -1, ""
}

func TestPkgVersion(t *testing.T) {
	ver, commit := wantVersion(t)
	dir := pkgMake(t, "build")
	for _, prog := range []string{"trident", "tridentctl"} {
		for _, flag := range []string{"--version", "-version"} {
			code, out := exitCode(t, exec.Command(filepath.Join(dir, prog), flag))
			want := fmt.Sprintf("%s %s (commit %s, %s)\n", prog, ver, commit, runtime.Version())
			if code != 0 || out != want {
				t.Errorf("%s %s: exit %d, %q; want exit 0, %q", prog, flag, code, out, want)
			}
		}
	}

	// Without ldflags (go build, go install): "devel" and the commit Go
	// stamps (none in a git worktree, whose .git is a file: Go looks for
	// a directory).
	plain := t.TempDir()
	pkgRun(t, pkgEnv("GOFLAGS=-buildvcs=true"), "go", "build", "-o", plain, "./cmd/trident", "./cmd/tridentctl")
	info := pkgRun(t, pkgEnv(), "go", "version", "-m", filepath.Join(plain, "trident"))
	stamped := "unknown"
	if m := regexp.MustCompile(`\bvcs\.revision=([0-9a-f]{7})`).FindStringSubmatch(info); m != nil {
		stamped = m[1]
		if strings.Contains(info, "vcs.modified=true") {
			stamped += "-dirty"
		}
	}
	if fi, err := os.Stat(filepath.Join(pkgRoot(t), ".git")); err == nil && fi.IsDir() && stamped == "unknown" {
		t.Fatalf("a build in a git checkout has no vcs.revision:\n%s", info)
	}
	for _, prog := range []string{"trident", "tridentctl"} {
		code, out := exitCode(t, exec.Command(filepath.Join(plain, prog), "--version"))
		want := fmt.Sprintf("%s devel (commit %s, %s)\n", prog, stamped, runtime.Version())
		if code != 0 || out != want {
			t.Errorf("plain go build: %s --version: exit %d, %q; want %q", prog, code, out, want)
		}
	}

	// The same version in the start-up log and /api/overview.
	hp, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
	p, err := testbin.Launch(context.Background(), testbin.Options{Binary: filepath.Join(dir, "trident"),
		DataDir: filepath.Join(t.TempDir(), "data"), ExtraArgs: []string{"--http-listen", web}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(); p.Cleanup() })
	logged, _ := os.ReadFile(p.LogPath)
	line := regexp.MustCompile(`(?m)^.*msg="trident [^"]*".*$`).Find(logged)
	for _, attr := range []string{"version=" + ver, "commit=" + commit, "go=" + runtime.Version()} {
		if !bytes.Contains(line, []byte(attr+" ")) && !bytes.HasSuffix(line, []byte(attr)) {
			t.Errorf("start-up line %q lacks %s; log:\n%s", line, attr, logged)
		}
	}
	var ov map[string]any
	if code := pkgGet(t, "http://"+web+"/api/overview", "guest", "guest", &ov); code != 200 {
		t.Fatalf("GET /api/overview: %d", code)
	}
	if ov["product_version"] != ver || ov["product_name"] != "Trident" || ov["rabbitmq_version"] != "3.10.0" {
		t.Errorf("overview: product_version %v (want %s), product_name %v, rabbitmq_version %v (want 3.10.0, what clients read)",
			ov["product_version"], ver, ov["product_name"], ov["rabbitmq_version"])
	}
}

// pkgGet GETs url with basic auth and decodes a 200 answer into out.
func pkgGet(t testing.TB, url, user, pass string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.SetBasicAuth(user, pass)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// healthcheckCmd is `bin healthcheck args...` with only PATH and env set.
func healthcheckCmd(bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"healthcheck"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	return cmd
}

func TestPkgHealthcheck(t *testing.T) {
	hp, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(hp))
	p := testbin.Start(t, "--http-listen", web)
	bin := p.Binary
	base := "TRIDENT_URL=http://" + web
	api := apiClient{base: "http://" + web, user: "guest", pass: "guest", t: t}
	api.expect(201, "PUT", "/api/users/watcher", map[string]any{"password": "w-pw", "tags": "monitoring"})
	api.expect(201, "PUT", "/api/users/plain", map[string]any{"password": "p-pw", "tags": ""})
	api.expect(201, "PUT", "/api/users/manager", map[string]any{"password": "m-pw", "tags": "management"})
	api.expect(201, "PUT", "/api/permissions/%2F/plain", map[string]any{"configure": ".*", "write": ".*", "read": ".*"})

	for _, c := range []struct {
		name string
		env  []string
		args []string
		want int
		out  string
	}{
		{"default check", []string{base}, nil, 0, "virtual-hosts: ok"},
		{"named checks", []string{base}, []string{"alarms", "protocol-listener/amqp"}, 0, "protocol-listener/amqp: ok"},
		{"--url", nil, []string{"--url", "http://" + web, "alarms"}, 0, "alarms: ok"},
		{"a failing check", []string{base}, []string{"alarms", "port-listener/1"}, 1, "HTTP 503"},
		{"wrong password", []string{base, "TRIDENT_USER=guest", "TRIDENT_PASSWORD=nope"}, nil, 1, "HTTP 401"},
		// Health checks need the monitoring tag, as in RabbitMQ.
		{"user without tags", []string{base, "TRIDENT_USER=plain", "TRIDENT_PASSWORD=p-pw"}, nil, 1, "HTTP 401"},
		{"management user", []string{base, "TRIDENT_USER=manager", "TRIDENT_PASSWORD=m-pw"}, nil, 1, "Not monitor user"},
		{"monitoring user", []string{base, "TRIDENT_USER=watcher", "TRIDENT_PASSWORD=w-pw"}, nil, 0, "virtual-hosts: ok"},
		// As in the image: the node's settings from the environment
		// (http.listen, default_user / default_pass).
		{"from the node's settings", []string{"TRIDENT_HTTP_LISTEN=:" + strconv.Itoa(hp),
			"TRIDENT_DEFAULT_USER=watcher", "TRIDENT_DEFAULT_PASS=w-pw"}, nil, 0, "virtual-hosts: ok"},
		{"default user is guest", []string{"TRIDENT_HTTP_LISTEN=127.0.0.1:" + strconv.Itoa(hp)}, nil, 0, "virtual-hosts: ok"},
		{"not a check name", []string{base}, []string{"../overview"}, 1, "not a health check name"},
		{"query smuggled", []string{base}, []string{"alarms?x=1"}, 1, "not a health check name"},
		{"unknown flag", []string{base}, []string{"--nope"}, 1, "flag provided but not defined"},
	} {
		code, out := exitCode(t, healthcheckCmd(bin, c.env, c.args...))
		if code != c.want || !strings.Contains(out, c.out) {
			t.Errorf("%s: healthcheck %v with %v: exit %d, want %d with %q:\n%s", c.name, c.args, c.env, code, c.want, c.out, out)
		}
	}
	p.Stop()
	code, out := exitCode(t, healthcheckCmd(bin, []string{base}))
	if code != 1 || !strings.Contains(out, "connection refused") {
		t.Errorf("healthcheck of a stopped node: exit %d:\n%s", code, out)
	}
}

// instruction is one Dockerfile instruction with its arguments.
type instruction struct{ cmd, args string }

// parseDockerfile reads a Dockerfile's instructions: continuation lines
// joined, comments dropped.
func parseDockerfile(t testing.TB, file string) []instruction {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("Dockerfile ends inside a continued line: %q", cur.String())
	}
	return out
}

// jsonArgs decodes an exec-form argument list.
func jsonArgs(t testing.TB, s string) []string {
	t.Helper()
	var a []string
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		t.Fatalf("%q is not an exec-form JSON array: %v", s, err)
	}
	return a
}

// imageSpec is what the Dockerfile says the image holds.
type imageSpec struct {
	from, user       string
	entrypoint       []string
	healthcheck      []string
	exposed, volumes []string
	env              map[string]string
	copies           map[string]string // image path → context path
	chown            map[string]string // image path → uid:gid
}

func readImageSpec(t testing.TB, root string) imageSpec {
	t.Helper()
	s := imageSpec{env: map[string]string{}, copies: map[string]string{}, chown: map[string]string{}}
	for _, in := range parseDockerfile(t, filepath.Join(root, "Dockerfile")) {
		switch in.cmd {
		case "FROM":
			s.from = in.args
		case "USER":
			s.user = in.args
		case "ENTRYPOINT":
			s.entrypoint = jsonArgs(t, in.args)
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(in.args, "CMD ")
			if !ok {
				t.Fatalf("HEALTHCHECK without CMD: %q", in.args)
			}
			s.healthcheck = jsonArgs(t, cmd)
		case "EXPOSE":
			s.exposed = append(s.exposed, strings.Fields(in.args)...)
		case "VOLUME":
			s.volumes = append(s.volumes, jsonArgs(t, in.args)...)
		case "ENV":
			k, v, _ := strings.Cut(in.args, "=")
			s.env[k] = v
		case "COPY":
			f := strings.Fields(in.args)
			owner := ""
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				if o, ok := strings.CutPrefix(f[0], "--chown="); ok {
					owner = o
				}
				f = f[1:]
			}
			dst := f[len(f)-1]
			for _, src := range f[:len(f)-1] {
				d := dst
				if strings.HasSuffix(dst, "/") {
					d = dst + path.Base(src)
				}
				s.copies[d] = src
				if owner != "" {
					s.chown[d] = owner
				}
			}
		}
	}
	return s
}

// rootUser reports whether a USER value runs as root.
func rootUser(u string) bool {
	name, _, _ := strings.Cut(u, ":")
	return name == "" || name == "root" || name == "0"
}

// listenPorts are the TCP ports of cfg's enabled listeners, by key; each
// must bind every interface.
func listenPorts(t testing.TB, cfg conf.Config) map[string]string {
	t.Helper()
	ports := map[string]string{}
	for key, addr := range map[string]string{"amqp.listen": cfg.AMQP.Listen, "mqtt.listen": cfg.MQTT.Listen,
		"mqtt.ws_listen": cfg.MQTT.WSListen, "stomp.listen": cfg.STOMP.Listen, "stomp.ws_listen": cfg.STOMP.WSListen,
		"stream.listen": cfg.Stream.Listen, "http.listen": cfg.HTTP.Listen, "prometheus.listen": cfg.Prometheus.Listen} {
		if addr == "" {
			t.Errorf("%s is off", key)
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s %q: %v", key, addr, err)
		}
		if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
			t.Errorf("%s %q binds one interface, not all", key, addr)
		}
		ports[key] = port
	}
	return ports
}

func TestPkgDockerfile(t *testing.T) {
	root := pkgRoot(t)
	spec := readImageSpec(t, root)
	if spec.from != "scratch" {
		t.Errorf("FROM %q: the image is FROM scratch (no registry here)", spec.from)
	}
	if spec.user == "" || rootUser(spec.user) || !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(spec.user) {
		t.Errorf("USER %q: want a numeric non-root uid:gid (a scratch image has no /etc/passwd)", spec.user)
	}
	if !slices.Equal(spec.entrypoint, []string{"/trident"}) || spec.copies["/trident"] != "bin/static/trident" {
		t.Errorf("ENTRYPOINT %q from %q: want /trident, the static build", spec.entrypoint, spec.copies["/trident"])
	}
	if !slices.Equal(spec.volumes, []string{"/data"}) || spec.chown["/data"] != spec.user {
		t.Errorf("VOLUME %q owned by %q: want /data, owned by USER %s", spec.volumes, spec.chown["/data"], spec.user)
	}

	// The image's configuration: data in the volume, every listener on
	// all interfaces and EXPOSEd, the gossip port for TCP and UDP.
	cfgPath := spec.env["TRIDENT_CONFIG"]
	src, ok := spec.copies[cfgPath]
	if !ok {
		t.Fatalf("ENV TRIDENT_CONFIG=%q is not a file the Dockerfile copies (%v)", cfgPath, spec.copies)
	}
	cfg, err := conf.Load([]string{"--config", filepath.Join(root, src)}, nil)
	if err != nil {
		t.Fatalf("the image's config %s: %v", src, err)
	}
	if cfg.DataDir != "/data" {
		t.Errorf("the image's data_dir is %q, not the volume /data", cfg.DataDir)
	}
	exposed := map[string]bool{}
	for _, p := range spec.exposed {
		if !strings.Contains(p, "/") {
			p += "/tcp"
		}
		exposed[p] = true
	}
	for key, port := range listenPorts(t, cfg) {
		if !exposed[port+"/tcp"] {
			t.Errorf("%s's port %s is not EXPOSEd (%v)", key, port, spec.exposed)
		}
	}
	for _, p := range []string{"5671/tcp", "5551/tcp", "8883/tcp", "61614/tcp", "15671/tcp", "25672/tcp", "25672/udp", "25673/tcp"} {
		if !exposed[p] {
			t.Errorf("%s (a TLS or inter-node port) is not EXPOSEd", p)
		}
	}

	// Every COPY source is what make build-static (or the tree) gives,
	// and .dockerignore lets it into the context. bin/ is make's BIN.
	bindir := pkgMake(t, "build-static")
	dir := filepath.Join(bindir, "static")
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for dst, src := range spec.copies {
		if !slices.Contains(strings.Split(string(ignore), "\n"), "!"+src) {
			t.Errorf("COPY %s %s: .dockerignore does not let %s in", src, dst, src)
		}
		local := filepath.Join(root, src)
		if rest, ok := strings.CutPrefix(src, "bin/"); ok {
			local = filepath.Join(bindir, rest)
		}
		if _, err := os.Stat(local); err != nil {
			t.Errorf("COPY %s %s: make build-static / the tree gives no %s: %v", src, dst, src, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "data")); err != nil || !fi.IsDir() {
		t.Errorf("make build-static made no data directory for the volume: %v", err)
	}

	// Static: no interpreter, no shared libraries (FROM scratch has no libc).
	for _, prog := range []string{"trident", "tridentctl"} {
		f, err := elf.Open(filepath.Join(dir, prog))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("bin/static/%s is dynamically linked (program header %v)", prog, p.Type)
			}
		}
		f.Close()
		ver, commit := wantVersion(t)
		code, out := exitCode(t, exec.Command(filepath.Join(dir, prog), "--version"))
		if want := fmt.Sprintf("%s %s (commit %s, %s)\n", prog, ver, commit, runtime.Version()); code != 0 || out != want {
			t.Errorf("static %s --version: %d %q, want %q", prog, code, out, want)
		}
	}

	// The HEALTHCHECK command exists in that binary and answers for a
	// running node, with the image's environment (its config file, here
	// with the node's HTTP port on loopback).
	if len(spec.healthcheck) < 1 || spec.copies[spec.healthcheck[0]] == "" {
		t.Fatalf("HEALTHCHECK CMD %q: want an exec-form command of a copied binary", spec.healthcheck)
	}
	hc := append([]string{filepath.Join(dir, path.Base(spec.copies[spec.healthcheck[0]]))}, spec.healthcheck[1:]...)
	hp, err := testbin.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, "--http-listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)))
	run := func() (int, string) {
		cmd := exec.Command(hc[0], hc[1:]...)
		cmd.Env = []string{"TRIDENT_CONFIG=" + filepath.Join(root, src), "TRIDENT_HTTP_LISTEN=:" + strconv.Itoa(hp)}
		return exitCode(t, cmd)
	}
	if code, out := run(); code != 0 {
		t.Errorf("HEALTHCHECK %q on a running node: exit %d:\n%s", hc, code, out)
	}
	p.Stop()
	if code, out := run(); code != 1 {
		t.Errorf("HEALTHCHECK %q on a stopped node: exit %d, want 1:\n%s", hc, code, out)
	}

	t.Run("podman", func(t *testing.T) { pkgImage(t, spec) })
}

// pkgImage builds the image with `make image` and checks what it holds
// without running it (podman run is refused on these machines).
func pkgImage(t *testing.T, spec imageSpec) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed: the image is not built (the Dockerfile's checks above ran)")
	}
	name := fmt.Sprintf("trident-pkgtest-%d", os.Getpid())
	ver, commit := wantVersion(t)
	// The image's tag is git describe's as it is (v0.1.0-...); the binary
	// reports it without the v.
	tag := pkgRun(t, pkgEnv(), "git", "describe", "--tags", "--always", "--dirty")
	pkgRun(t, pkgEnv(), "make", "--no-print-directory", "image", "IMAGE="+name)
	t.Cleanup(func() {
		_ = exec.Command("podman", "rmi", "-f", name+":latest", name+":"+tag).Run()
	})
	var inspect []struct {
		Config struct {
			User         string
			Entrypoint   []string
			Env          []string
			ExposedPorts map[string]struct{}
			Volumes      map[string]struct{}
			StopSignal   string
			Labels       map[string]string
		}
		HealthCheck struct{ Test []string }
	}
	out := pkgRun(t, pkgEnv(), "podman", "image", "inspect", name+":"+tag)
	if err := json.Unmarshal([]byte(out), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v\n%s", err, out)
	}
	c := inspect[0].Config
	if c.User != spec.user || rootUser(c.User) {
		t.Errorf("image user %q, want %q", c.User, spec.user)
	}
	if !slices.Equal(c.Entrypoint, []string{"/trident"}) {
		t.Errorf("image entrypoint %q", c.Entrypoint)
	}
	if _, ok := c.Volumes["/data"]; !ok || len(c.Volumes) != 1 {
		t.Errorf("image volumes %v, want /data", c.Volumes)
	}
	for _, p := range []string{"5672/tcp", "1883/tcp", "61613/tcp", "15672/tcp", "15692/tcp", "25672/udp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("image does not expose %s: %v", p, c.ExposedPorts)
		}
	}
	if !slices.Contains(c.Env, "TRIDENT_CONFIG="+spec.env["TRIDENT_CONFIG"]) {
		t.Errorf("image env %q", c.Env)
	}
	if !slices.Equal(inspect[0].HealthCheck.Test, append([]string{"CMD"}, spec.healthcheck...)) {
		t.Errorf("image healthcheck %q, want CMD %q (docker format keeps it)", inspect[0].HealthCheck.Test, spec.healthcheck)
	}
	if c.Labels["org.opencontainers.image.version"] != tag {
		t.Errorf("image version label %q, want %q", c.Labels["org.opencontainers.image.version"], tag)
	}

	// Its files, from `podman save`: the layers in order.
	dir := t.TempDir()
	archive := filepath.Join(dir, "image.tar")
	pkgRun(t, pkgEnv(), "podman", "save", "--format", "docker-archive", "-o", archive, name+":"+tag)
	files := imageFiles(t, archive)
	if h, ok := files["data"]; !ok || h.Typeflag != tar.TypeDir || fmt.Sprintf("%d:%d", h.Uid, h.Gid) != spec.user {
		t.Errorf("/data in the image: %+v, want a directory owned by %s", h, spec.user)
	}
	for _, f := range []string{"trident", "tridentctl", "etc/trident/trident.yaml"} {
		h, ok := files[f]
		if !ok {
			t.Fatalf("/%s is not in the image", f)
		}
		if h.Uid != 0 || h.Mode&0o022 != 0 {
			t.Errorf("/%s: uid %d mode %o: the running user must not be able to change it", f, h.Uid, h.Mode)
		}
	}
	// The image's binary runs here: its version is this build's.
	bin := filepath.Join(dir, "trident")
	if err := os.WriteFile(bin, files["trident"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	code, got := exitCode(t, exec.Command(bin, "--version"))
	if want := fmt.Sprintf("trident %s (commit %s, %s)\n", ver, commit, runtime.Version()); code != 0 || got != want {
		t.Errorf("the image's /trident --version: %d %q, want %q", code, got, want)
	}
}

// imageFile is one file of an image with its header.
type imageFile struct {
	*tar.Header
	data []byte
}

// imageFiles reads a docker-archive: the files of its layers, later layers
// winning, by path without the leading slash.
func imageFiles(t testing.TB, archive string) map[string]imageFile {
	t.Helper()
	members := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(io.LimitReader(tr, 256<<20))
		if err != nil {
			t.Fatal(err)
		}
		members[h.Name] = b
	}
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(members["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v", err)
	}
	files := map[string]imageFile{}
	for _, l := range manifest[0].Layers {
		lr := tar.NewReader(bytes.NewReader(members[l]))
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l, err)
			}
			b, _ := io.ReadAll(lr)
			files[strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), "/")] = imageFile{h, b}
		}
	}
	return files
}

// composeFile is the part of a compose file the checks read.
type composeFile struct {
	Services map[string]struct {
		Image           string            `yaml:"image"`
		Hostname        string            `yaml:"hostname"`
		EnvFile         string            `yaml:"env_file"`
		Environment     map[string]string `yaml:"environment"`
		Secrets         []yaml.Node       `yaml:"secrets"`
		Volumes         []string          `yaml:"volumes"`
		Ports           []string          `yaml:"ports"`
		StopGracePeriod string            `yaml:"stop_grace_period"`
	} `yaml:"services"`
	Secrets map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
	Volumes map[string]any `yaml:"volumes"`
}

// composeInterpolate replaces ${VAR} and ${VAR:?message} as compose does.
func composeInterpolate(s string, vars map[string]string) (string, error) {
	var missing error
	out := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:\?[^}]*)?\}`).ReplaceAllStringFunc(s, func(m string) string {
		sub := regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)(:\?([^}]*))?\}$`).FindStringSubmatch(m)
		v, ok := vars[sub[1]]
		if !ok && sub[2] != "" {
			missing = fmt.Errorf("%s: %s", sub[1], sub[3])
		}
		return v
	})
	return out, missing
}

// composeNode is one service of deploy/compose.yaml, resolved on the host.
type composeNode struct {
	service string
	env     []string          // what the container's environment holds
	mounts  map[string]string // container path → host file
	cfg     conf.Config       // conf.Load of its config with env
}

func TestPkgCompose(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("deploy/gen-certs.sh needs openssl: %v", err)
	}
	root := pkgRoot(t)
	deploy := filepath.Join(root, "deploy")
	// gen-certs.sh into a copy of deploy/, where compose would find them.
	work := t.TempDir()
	for _, f := range []string{"compose.yaml", "cluster.yaml", "gen-certs.sh"} {
		b, err := os.ReadFile(filepath.Join(deploy, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gen := exec.Command("sh", filepath.Join(work, "gen-certs.sh"))
	gen.Dir = work
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("gen-certs.sh: %v\n%s", err, out)
	}
	if code, out := exitCode(t, exec.Command("sh", filepath.Join(work, "gen-certs.sh"))); code == 0 {
		t.Errorf("gen-certs.sh over existing secrets succeeded; it must refuse:\n%s", out)
	}
	secrets := filepath.Join(work, "secrets")
	ca := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(secrets, "ca.crt"))
	if err != nil || !ca.AppendCertsFromPEM(caPEM) {
		t.Fatalf("secrets/ca.crt: %v", err)
	}

	data, err := os.ReadFile(filepath.Join(work, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const adminPass = "compose-admin-pw"
	if _, err := composeInterpolate(string(data), nil); err == nil {
		t.Errorf("compose.yaml starts without TRIDENT_ADMIN_PASSWORD: the admin password must be required")
	}
	text, err := composeInterpolate(string(data), map[string]string{"TRIDENT_ADMIN_PASSWORD": adminPass})
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal([]byte(text), &cf); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	names := []string{"trident-1", "trident-2", "trident-3"}
	if len(cf.Services) != 3 {
		t.Fatalf("compose.yaml has services %v, want %v", cf.Services, names)
	}
	var nodes []composeNode
	published := 0
	volumes := map[string]string{}
	for _, name := range names {
		svc, ok := cf.Services[name]
		if !ok {
			t.Fatalf("no service %s", name)
		}
		if svc.Image != "localhost/trident:latest" || svc.Hostname != name {
			t.Errorf("%s: image %q hostname %q", name, svc.Image, svc.Hostname)
		}
		if d, err := time.ParseDuration(svc.StopGracePeriod); err != nil || d < 30*time.Second {
			t.Errorf("%s: stop_grace_period %q: SIGTERM needs time to close clients and flush", name, svc.StopGracePeriod)
		}
		n := composeNode{service: name, mounts: map[string]string{}}
		for k, v := range svc.Environment {
			n.env = append(n.env, k+"="+v)
		}
		if svc.EnvFile == "" {
			t.Fatalf("%s: no env_file (the gossip key)", name)
		}
		envFile, err := os.ReadFile(filepath.Join(work, svc.EnvFile))
		if err != nil {
			t.Fatalf("%s: env_file %s: gen-certs.sh did not make it: %v", name, svc.EnvFile, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(envFile)), "\n") {
			n.env = append(n.env, l)
		}
		for _, v := range svc.Volumes {
			f := strings.Split(v, ":")
			if len(f) < 2 {
				t.Fatalf("%s: volume %q", name, v)
			}
			if strings.HasPrefix(f[0], ".") {
				n.mounts[f[1]] = filepath.Join(work, f[0])
				continue
			}
			if _, ok := cf.Volumes[f[0]]; !ok {
				t.Errorf("%s: volume %s is not declared", name, f[0])
			}
			if other, dup := volumes[f[0]]; dup {
				t.Errorf("%s and %s share the volume %s", other, name, f[0])
			}
			volumes[f[0]] = name
			n.mounts[f[1]] = "volume:" + f[0]
		}
		for _, s := range svc.Secrets {
			var source, target string
			switch s.Kind {
			case yaml.ScalarNode:
				source, target = s.Value, s.Value
			case yaml.MappingNode:
				var long struct{ Source, Target string }
				if err := s.Decode(&long); err != nil {
					t.Fatal(err)
				}
				source, target = long.Source, long.Target
			}
			sec, ok := cf.Secrets[source]
			if !ok || sec.File == "" {
				t.Fatalf("%s: secret %q is not declared with a file", name, source)
			}
			n.mounts[path.Join("/run/secrets", target)] = filepath.Join(work, sec.File)
		}
		if len(svc.Ports) > 0 {
			published++
			for _, p := range []string{"5672:5672", "15672:15672", "1883:1883", "61613:61613"} {
				if !slices.Contains(svc.Ports, p) {
					t.Errorf("%s publishes %v, not %s", name, svc.Ports, p)
				}
			}
		}

		// The node's configuration as the container sees it.
		env := map[string]string{}
		for _, kv := range n.env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		cfgFile, ok := n.mounts[env["TRIDENT_CONFIG"]]
		if !ok {
			t.Fatalf("%s: TRIDENT_CONFIG %q is not mounted", name, env["TRIDENT_CONFIG"])
		}
		hostEnv := func(k string) string {
			if k == "TRIDENT_CONFIG" {
				return cfgFile
			}
			return env[k]
		}
		n.cfg, err = conf.Load(nil, hostEnv)
		if err != nil {
			t.Fatalf("%s: its configuration does not load: %v", name, err)
		}
		cl := n.cfg.Cluster
		if n.mounts[n.cfg.DataDir] != "volume:data-"+name[len(name)-1:] {
			t.Errorf("%s: data_dir %s is not its own volume (%v)", name, n.cfg.DataDir, n.mounts)
		}
		if cl.NodeName != "trident@"+name || cl.BootstrapExpect != 3 || cl.Cookie != "" {
			t.Errorf("%s: node_name %q bootstrap_expect %d cookie set %v", name, cl.NodeName, cl.BootstrapExpect, cl.Cookie != "")
		}
		_, gport, _ := net.SplitHostPort(cl.GossipListen)
		var wantJoin []string
		for _, o := range names {
			if o != name {
				wantJoin = append(wantJoin, o+":"+gport)
			}
		}
		if !slices.Equal(cl.Join, wantJoin) {
			t.Errorf("%s: join %v, want %v", name, cl.Join, wantJoin)
		}
		if keys, err := cl.GossipKeys(); err != nil || len(keys) != 1 {
			t.Errorf("%s: gossip key: %v (%d keys)", name, err, len(keys))
		}
		// Every file the config names is mounted from what gen-certs.sh made.
		missing := false
		for key, p := range map[string]string{"cluster.cookie_file": cl.CookieFile, "cluster.tls.cert_file": cl.TLS.CertFile,
			"cluster.tls.key_file": cl.TLS.KeyFile, "cluster.tls.ca_file": cl.TLS.CAFile} {
			host, ok := n.mounts[p]
			if !ok {
				t.Errorf("%s: %s %q is not mounted", name, key, p)
				missing = true
				continue
			}
			if _, err := os.Stat(host); err != nil {
				t.Errorf("%s: %s comes from %s, which gen-certs.sh did not make: %v", name, key, host, err)
				missing = true
			}
		}
		if missing {
			continue
		}
		r, err := cookie.Load(n.mounts[cl.CookieFile])
		if err != nil || r.Created || r.TooOpen() {
			t.Errorf("%s: cookie: %v created %v mode %v", name, err, r.Created, r.Mode)
		}
		pair, err := tls.LoadX509KeyPair(n.mounts[cl.TLS.CertFile], n.mounts[cl.TLS.KeyFile])
		if err != nil {
			t.Fatalf("%s: node certificate and key: %v", name, err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		if n.mounts[cl.TLS.CAFile] != filepath.Join(secrets, "ca.crt") || !slices.Equal(leaf.DNSNames, []string{name}) {
			t.Errorf("%s: CA %s, certificate for %v", name, n.mounts[cl.TLS.CAFile], leaf.DNSNames)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("%s: certificate does not verify for %v: %v", name, usage, err)
			}
		}
		if fi, err := os.Stat(n.mounts[cl.TLS.KeyFile]); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: key file mode %v: %v", name, fi.Mode(), err)
		}
		nodes = append(nodes, n)
	}
	if published != 1 {
		t.Errorf("%d services publish ports, want the one node", published)
	}
	if key, _ := os.ReadFile(filepath.Join(secrets, "ca.key")); bytes.Contains(key, []byte("BEGIN")) {
		for _, n := range nodes {
			for _, host := range n.mounts {
				if host == filepath.Join(secrets, "ca.key") {
					t.Errorf("%s mounts the CA's key", n.service)
				}
			}
		}
	} else {
		t.Errorf("gen-certs.sh made no CA key")
	}
	if t.Failed() {
		return
	}
	composeRun(t, nodes, adminPass)
}

// composeRun starts the three nodes as processes here with their compose
// configuration, only the addresses moved to loopback ports and the
// mounted files read where gen-certs.sh wrote them: they form the cluster
// over mutual TLS with the cookie and the gossip key, the admin of the
// compose file logs in, and a quorum queue replicates.
func composeRun(t *testing.T, nodes []composeNode, adminPass string) {
	bin, err := testbin.Binary()
	if err != nil {
		t.Fatal(err)
	}
	type proc struct {
		name, web, gossip, raft string
		p                       *testbin.Proc
	}
	procs := make([]*proc, len(nodes))
	for i, n := range nodes {
		hp, err1 := testbin.FreePort()
		rp, err2 := testbin.FreePort()
		gp, err3 := testbin.FreeTCPUDPPort()
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		procs[i] = &proc{name: n.cfg.Cluster.NodeName, web: net.JoinHostPort("127.0.0.1", strconv.Itoa(hp)),
			raft: net.JoinHostPort("127.0.0.1", strconv.Itoa(rp)), gossip: net.JoinHostPort("127.0.0.1", strconv.Itoa(gp))}
	}
	var wg sync.WaitGroup
	for i, n := range nodes {
		cl := n.cfg.Cluster
		var join []string
		for j, o := range procs {
			if j != i {
				join = append(join, o.gossip)
			}
		}
		args := []string{"--config", n.mounts["/etc/trident/cluster.yaml"],
			"--http-listen", procs[i].web, "--cluster-gossip-listen", procs[i].gossip, "--cluster-raft-listen", procs[i].raft,
			"--join", strings.Join(join, ","), "--cluster-failure-detection", "fast",
			"--cluster-node-name", cl.NodeName, "--cluster-gossip-key", cl.GossipKey,
			"--default-user", n.cfg.DefaultUser, "--default-pass", n.cfg.DefaultPass,
			"--cluster-cookie-file", n.mounts[cl.CookieFile],
			"--cluster-tls-cert-file", n.mounts[cl.TLS.CertFile], "--cluster-tls-key-file", n.mounts[cl.TLS.KeyFile],
			"--cluster-tls-ca-file", n.mounts[cl.TLS.CAFile]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := testbin.Launch(context.Background(), testbin.Options{Binary: bin,
				DataDir: filepath.Join(t.TempDir(), "data"), ExtraArgs: args})
			if err != nil {
				t.Errorf("start %s: %v", procs[i].name, err)
				return
			}
			procs[i].p = p
		}()
	}
	wg.Wait()
	nodesOf := func(pr *proc) (names []string, leader string) {
		var ms []struct {
			Name       string `json:"name"`
			Running    bool   `json:"running"`
			MetaLeader bool   `json:"meta_leader"`
		}
		if pkgGetQuiet("http://"+pr.web+"/api/nodes", "admin", adminPass, &ms) != 200 {
			return nil, ""
		}
		for _, m := range ms {
			if m.Running {
				names = append(names, m.Name)
			}
			if m.MetaLeader {
				leader = m.Name
			}
		}
		slices.Sort(names)
		return names, leader
	}
	t.Cleanup(func() {
		// One at a time, the metadata leader last of two (as startCluster).
		ps, names := make([]*testbin.Proc, len(procs)), make([]string, len(procs))
		for i, pr := range procs {
			ps[i], names[i] = pr.p, pr.name
		}
		stopInTurn(t, ps, names, func(i int) string { _, leader := nodesOf(procs[i]); return leader })
		for _, pr := range procs {
			if pr.p == nil {
				continue
			}
			if t.Failed() {
				if b, err := os.ReadFile(pr.p.LogPath); err == nil {
					t.Logf("tail of %s's log:\n%s", pr.name, b[max(0, len(b)-4000):])
				}
			}
			pr.p.Cleanup()
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	want := []string{"trident@trident-1", "trident@trident-2", "trident@trident-3"}
	for _, pr := range procs {
		eventually(t, 30*time.Second, pr.name+" sees the three nodes running", func() bool {
			names, _ := nodesOf(pr)
			return slices.Equal(names, want)
		})
	}
	for _, pr := range procs {
		logged, _ := os.ReadFile(pr.p.LogPath)
		if !bytes.Contains(logged, []byte("cookie read from its file")) {
			t.Errorf("%s did not read the cookie from its file:\n%s", pr.name, logged)
		}
	}

	// The inter-node port is mutual TLS with gen-certs.sh's CA: a node's
	// certificate is taken, none is refused.
	cl := nodes[1].cfg.Cluster
	pair, err := tls.LoadX509KeyPair(nodes[1].mounts[cl.TLS.CertFile], nodes[1].mounts[cl.TLS.KeyFile])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(nodes[1].mounts[cl.TLS.CAFile])
	ca := x509.NewCertPool()
	ca.AppendCertsFromPEM(caPEM)
	for _, withCert := range []bool{true, false} {
		c := &tls.Config{RootCAs: ca, ServerName: "trident-1", MinVersion: tls.VersionTLS13}
		if withCert {
			c.Certificates = []tls.Certificate{pair}
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", procs[0].raft, c)
		if err != nil {
			t.Fatalf("TLS to %s's Raft port (client certificate %v): %v", procs[0].name, withCert, err)
		}
		// TLS 1.3: a refused client certificate shows on the first read.
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 1))
		var ne net.Error
		timedOut := errors.As(err, &ne) && ne.Timeout()
		conn.Close()
		if withCert != timedOut {
			t.Errorf("Raft port with client certificate %v: read %v", withCert, err)
		}
	}

	// The compose file's administrator, through a quorum queue on all three.
	url := func(pr *proc) string { return "amqp://admin:" + adminPass + "@" + pr.p.AMQPAddr + "/" }
	conn1, err := amqp.Dial(url(procs[0]))
	if err != nil {
		t.Fatalf("admin on %s: %v", procs[0].name, err)
	}
	defer conn1.Close()
	ch1, err := conn1.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch1.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch1.QueueDeclare("compose-q", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := confirmOne(ch1, "compose-q", 10*time.Second); err != nil {
		t.Fatalf("publish to the quorum queue: %v", err)
	}
	conn3, err := amqp.Dial(url(procs[2]))
	if err != nil {
		t.Fatalf("admin on %s: %v", procs[2].name, err)
	}
	defer conn3.Close()
	ch3, err := conn3.Channel()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the message from trident-1 on trident-3", func() bool {
		_, ok, err := ch3.Get("compose-q", true)
		return err == nil && ok
	})

	// The image's healthcheck with the compose node's environment.
	env := append([]string{"TRIDENT_URL=http://" + procs[1].web}, nodes[1].env...)
	for i, kv := range env {
		if strings.HasPrefix(kv, "TRIDENT_CONFIG=") {
			env[i] = "TRIDENT_CONFIG=" + nodes[1].mounts["/etc/trident/cluster.yaml"]
		}
	}
	if code, out := exitCode(t, healthcheckCmd(bin, env)); code != 0 {
		t.Errorf("healthcheck with trident-2's compose environment: exit %d:\n%s", code, out)
	}
}

// pkgGetQuiet is pkgGet that returns 0 on a transport error.
func pkgGetQuiet(url, user, pass string, out any) int {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.SetBasicAuth(user, pass)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && out != nil && json.NewDecoder(resp.Body).Decode(out) != nil {
		return 0
	}
	return resp.StatusCode
}

// unitFile is a systemd unit: section → key → values in order.
type unitFile map[string]map[string][]string

func parseUnit(t testing.TB, file string) unitFile {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, "\\") {
				t.Fatalf("%s:%d: %q is not key=value in a section", file, n, line)
			}
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

func TestPkgSystemdUnit(t *testing.T) {
	root := pkgRoot(t)
	unit := filepath.Join(root, "deploy", "trident.service")
	u := parseUnit(t, unit)
	svc := u["Service"]
	if svc == nil || u["Unit"] == nil || u["Install"] == nil {
		t.Fatalf("sections %v, want Unit, Service and Install", u)
	}
	last := func(k string) string {
		if v := svc[k]; len(v) > 0 {
			return v[len(v)-1]
		}
		return "<unset>"
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "StateDirectory": "trident", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
		"AmbientCapabilities": "", "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
		"SystemCallFilter": "@system-service", "KillSignal": "SIGTERM", "RestrictSUIDSGID": "yes",
		"MemoryDenyWriteExecute": "yes", "SystemCallArchitectures": "native", "Restart": "on-failure",
	} {
		if got := last(k); got != want {
			t.Errorf("[Service] %s=%s, want %q", k, got, want)
		}
	}
	// Not ProcSubset=pid: the memory alarm reads /proc/meminfo.
	if v, ok := svc["ProcSubset"]; ok {
		t.Errorf("ProcSubset=%v hides /proc/meminfo from the memory alarm", v)
	}
	if n, err := strconv.Atoi(last("LimitNOFILE")); err != nil || n < 65536 {
		t.Errorf("LimitNOFILE=%s: a broker needs a file descriptor per connection (at least 65536)", last("LimitNOFILE"))
	}
	// Longer than the broker's own shutdown (10 s, then 5 s for the store).
	if d, err := time.ParseDuration(last("TimeoutStopSec")); err != nil || d < 60*time.Second {
		t.Errorf("TimeoutStopSec=%s: a drain and a clean stop need at least 60s", last("TimeoutStopSec"))
	}

	// ExecStart's arguments load as a configuration: data in the state
	// directory, the config file deploy/trident.yaml installs as.
	exec0 := strings.Fields(last("ExecStart"))
	if len(exec0) == 0 || exec0[0] != "/usr/local/bin/trident" {
		t.Fatalf("ExecStart=%s", last("ExecStart"))
	}
	state := t.TempDir()
	var args []string
	for _, a := range exec0[1:] {
		a = strings.ReplaceAll(a, "${STATE_DIRECTORY}", state)
		a = strings.ReplaceAll(a, "/etc/trident/trident.yaml", filepath.Join(root, "deploy", "trident.yaml"))
		args = append(args, a)
	}
	cfg, err := conf.Load(args, nil)
	if err != nil {
		t.Fatalf("ExecStart's arguments %q: %v", args, err)
	}
	if cfg.DataDir != state {
		t.Errorf("ExecStart's data_dir %q, want the StateDirectory", cfg.DataDir)
	}
	listenPorts(t, cfg)

	// systemd's own check where it is installed, with ExecStart at a real
	// binary.
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze is not installed: only the checks above ran")
		return
	}
	dir := t.TempDir()
	b, _ := os.ReadFile(unit)
	b = bytes.ReplaceAll(b, []byte("/usr/local/bin/trident "), []byte(filepath.Join(pkgMake(t, "build"), "trident")+" "))
	if err := os.WriteFile(filepath.Join(dir, "trident.service"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sa, "verify", "./trident.service")
	cmd.Dir = dir
	if code, out := exitCode(t, cmd); code != 0 || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: exit %d:\n%s", code, out)
	}
}

func TestPkgLicense(t *testing.T) {
	root := pkgRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{"Apache License", "Version 2.0, January 2004",
		"TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION", "1. Definitions.",
		"2. Grant of Copyright License.", "3. Grant of Patent License.", "4. Redistribution.",
		"5. Submission of Contributions.", "6. Trademarks.", "7. Disclaimer of Warranty.",
		"8. Limitation of Liability.", "9. Accepting Warranty or Additional Liability.",
		"END OF TERMS AND CONDITIONS", "Copyright 2026 The Trident authors"} {
		if !strings.Contains(text, want) {
			t.Errorf("LICENSE lacks %q", want)
		}
	}
	// Debian ships the standard text: LICENSE is it word for word, with
	// the appendix's copyright line filled in.
	if std, err := os.ReadFile("/usr/share/common-licenses/Apache-2.0"); err == nil {
		filled := strings.Replace(string(std), "Copyright [yyyy] [name of copyright owner]", "Copyright 2026 The Trident authors", 1)
		if filled != text {
			t.Errorf("LICENSE differs from the standard Apache License 2.0 text")
		}
	}
}
