package stomp

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/protocol/stomp/frame"
)

// negotiate picks the highest version in an accept-version header; no
// header means 1.0.
func negotiate(f *frame.Frame) (frame.Version, bool) {
	av, ok := f.Get("accept-version")
	if !ok {
		return frame.V10, true
	}
	var best frame.Version
	for _, p := range strings.Split(av, ",") {
		if v, ok := frame.ParseVersion(strings.TrimSpace(p)); ok && v > best {
			best = v
		}
	}
	return best, best != 0
}

// parseHeartbeat reads "cx,cy" in milliseconds.
func parseHeartbeat(s string) (cx, cy int64, ok bool) {
	a, b, found := strings.Cut(s, ",")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	y, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if err1 != nil || err2 != nil || x < 0 || y < 0 {
		return 0, 0, false
	}
	return x, y, true
}

// connect handles CONNECT or STOMP: version, heart-beats, login, vhost.
func (c *conn) connect(f *frame.Frame) error {
	c.logAccepted(f)
	v, ok := negotiate(f)
	if !ok {
		return errorf("Version mismatch", "Supported versions are 1.0,1.1,1.2\n")
	}
	c.version = v
	cfg := &c.s.cfg
	if hb, ok := f.Get("heart-beat"); ok && v >= frame.V11 {
		cx, cy, ok := parseHeartbeat(hb)
		if !ok {
			return errorf("Invalid heart-beat header", "heart-beat '%s' is not two comma-separated non-negative integers", hb)
		}
		// We send as often as the client wants to receive, and expect
		// what it offers to send.
		if cy > 0 {
			c.hbOut = max(time.Duration(cy)*time.Millisecond, cfg.MinHeartbeat)
		}
		if cx > 0 {
			c.hbIn = max(time.Duration(cx)*time.Millisecond, cfg.MinHeartbeat)
		}
	}
	login, hasLogin := f.Get("login")
	pass := f.Value("passcode")
	certUser := ""
	if !hasLogin {
		certUser = c.certLoginUser() // see certlogin.go
	}
	_, hasPass := f.Get("passcode")
	if !hasLogin && certUser != "" {
		login = certUser
	} else if !hasLogin && hasPass && c.s.users.TokenLogins() {
		login = "token" // an OAuth 2 token as passcode names its own user
	} else if !hasLogin {
		// Anonymous: only when the operator asked for it, and then as
		// the STOMP listeners' own user, never the bootstrap admin.
		if !cfg.AllowAnonymous || cfg.DefaultUser == "" {
			return errorf("Bad CONNECT", "Missing login or passcode header(s)")
		}
		login, pass = cfg.DefaultUser, cfg.DefaultPass
	}
	vhost := cfg.DefaultVHost
	if h, ok := f.Get("host"); ok && h != "" {
		vhost = h
	}
	var u *auth.User
	var err error
	if certUser != "" {
		u, err = c.s.users.AuthenticateCert(certUser, c.t.remoteAddr())
	} else {
		u, err = c.s.users.Authenticate(login, pass, c.t.remoteAddr())
	}
	if err != nil {
		// auth logs a refused password or token; a certificate's user
		// is logged as the refusal.
		c.lg.loginName = login
		c.lg.refusalLogged = certUser == ""
		if errors.Is(err, auth.ErrLoopbackOnly) {
			return errorf("Bad CONNECT", "User '%s' can only connect via localhost", login)
		}
		return errorf("Bad CONNECT", "Access refused for user '%s'", login)
	}
	vh, ok := c.s.b.VHost(vhost)
	if !ok {
		return errorf("Bad CONNECT", "Virtual host '%s' access denied", vhost)
	}
	if err := c.s.users.CheckVHost(u, vhost); err != nil {
		return errorf("Bad CONNECT", "Virtual host '%s' access denied", vhost)
	}
	if err := c.openLimited(u.Name(), vhost); err != nil {
		return err
	}
	c.user, c.vh = u, vh
	c.session = randomID("session-")
	c.client = map[string]any{}
	for _, h := range f.Headers {
		if h.Key != "passcode" {
			if _, dup := c.client[h.Key]; !dup {
				c.client[h.Key] = h.Value
			}
		}
	}
	hs := []frame.Header{
		{Key: "server", Value: cfg.Product + "/" + version},
		{Key: "session", Value: c.session},
		{Key: "heart-beat", Value: strconv.FormatInt(c.hbOut.Milliseconds(), 10) + "," + strconv.FormatInt(c.hbIn.Milliseconds(), 10)},
		{Key: "version", Value: v.String()},
	}
	c.writeFrame(&frame.Frame{Command: frame.CONNECTED, Headers: hs})
	c.opened.Store(true)
	c.expiry = auth.WatchExpiry(u, func() {
		c.log.Warn("closing STOMP connection: credential has expired", "user", u.Name())
		c.kill(&Error{Message: "credential expired", Detail: "The OAuth 2 token of user '" + u.Name() + "' has expired"}, "")
	})
	if c.hbOut > 0 || c.hbIn > 0 {
		go c.heartbeater()
	}
	if id, ok := f.Get("receipt"); ok {
		c.receipt(id)
	}
	c.logAuthenticated()
	return nil
}
