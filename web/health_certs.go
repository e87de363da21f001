package web

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/trident-broker/trident/auth"
)

// The certificate-expiration check (RabbitMQ's
// /api/health/checks/certificate-expiration/{within}/{unit}): 503 naming
// the TLS listeners whose certificate file or CA file holds a certificate
// that expires within the window (or one that cannot be read, or is not
// valid yet), else 200. It reads the files as they are on disk now, as
// RabbitMQ does.

// Errors of parseExpiryWindow, with RabbitMQ's texts (answered as 400).
var (
	errExpiryValue = errors.New("Invalid expiration value.")
	errExpiryUnit  = errors.New("Time unit not recognised. Supported units: days, weeks, months, years.")
)

// expiryUnits are the units in seconds: a month is a twelfth of a year
// of 365 days, as RabbitMQ counts.
var expiryUnits = map[string]float64{
	"days":   86400,
	"weeks":  7 * 86400,
	"months": 365 * 86400 / 12.0,
	"years":  365 * 86400,
}

// maxExpiryWindow bounds the window (a larger one asks about every
// certificate alike), so that no product overflows.
const maxExpiryWindow = 200 * 365 * 24 * time.Hour

// parseExpiryWindow reads {within}/{unit}: a whole number (as RabbitMQ's
// binary_to_integer: an optional sign and digits) and a unit, in any case.
func parseExpiryWindow(within, unit string) (time.Duration, error) {
	n, err := strconv.ParseInt(within, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, errExpiryValue
	}
	secs, found := expiryUnits[strings.ToLower(unit)]
	if !found {
		return 0, errExpiryUnit
	}
	d := float64(n) * secs
	switch {
	case math.IsNaN(d):
		return 0, errExpiryValue
	case d > maxExpiryWindow.Seconds():
		return maxExpiryWindow, nil
	case d < -maxExpiryWindow.Seconds():
		return -maxExpiryWindow, nil
	}
	return time.Duration(d * float64(time.Second)), nil
}

// maxCertFile bounds how much of a certificate file is read.
const maxCertFile = 1 << 20

// certExpiries lists what in the PEM file at path expires before
// deadline: each such certificate's expiry date, or one error (the file
// cannot be read, holds no PEM entry, an entry that is not a certificate,
// or a certificate not valid yet). Empty when nothing does.
func certExpiries(path string, now, deadline time.Time) (expiring []string, failure string) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err.Error()
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCertFile))
	if err != nil {
		return nil, err.Error()
	}
	found := false
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		found = true
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Sprintf("The certificate file provided contains a %s entry", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, "The certificate file provided holds a certificate that does not parse: " + err.Error()
		}
		if c.NotBefore.After(now) {
			return nil, "Certificate is not yet valid"
		}
		if c.NotAfter.Before(deadline) {
			expiring = append(expiring, c.NotAfter.UTC().Format("2006-01-02 15:04:05"))
		}
	}
	if !found {
		return nil, "The certificate file provided does not contain any PEM entry."
	}
	return expiring, ""
}

// expiryJSON is a file's entry in the answer: the expiry dates, or
// {"error": reason}.
func expiryJSON(expiring []string, failure string) any {
	if failure != "" {
		return map[string]string{"error": failure}
	}
	if expiring == nil {
		return []string{}
	}
	return expiring
}

func (s *Server) certificateExpiration(w http.ResponseWriter, r *http.Request, u *auth.User) {
	window, err := parseExpiryWindow(pathValue(r, "within"), pathValue(r, "unit"))
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	now := time.Now()
	deadline := now.Add(window)
	expired := []map[string]any{}
	for _, l := range s.listeners() {
		if l.Addr == nil || (l.CertFile == "" && l.CAFile == "") {
			continue
		}
		var certExp, caExp []string
		var certErr, caErr string
		if l.CertFile != "" {
			certExp, certErr = certExpiries(l.CertFile, now, deadline)
		}
		if l.CAFile != "" {
			caExp, caErr = certExpiries(l.CAFile, now, deadline)
		}
		if len(certExp) == 0 && certErr == "" && len(caExp) == 0 && caErr == "" {
			continue
		}
		h, p := splitHostPort(l.Addr.String())
		expired = append(expired, map[string]any{"node": s.node, "protocol": l.Protocol, "interface": h, "port": p,
			"certfile": l.CertFile, "cacertfile": l.CAFile,
			"certfile_expires_on": expiryJSON(certExp, certErr), "cacertfile_expires_on": expiryJSON(caExp, caErr)})
	}
	if len(expired) > 0 {
		failed(w, "Certificates expiring", map[string]any{"expired": expired})
		return
	}
	ok(w, r, u)
}
