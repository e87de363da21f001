package mux

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// The cookie never travels: each side proves it knows it by an HMAC over
// both ends' fresh nonces, the stream, the address the dialer dialled
// (which must be the acceptor's advertised address) and the address the
// dialer advertises (auth.go; doc.go has the exchange). So a node outside
// the cluster learns nothing from being dialled (a probe of a new member
// used to hand it the cookie), a recorded handshake cannot be replayed,
// and a proof made for one node is no good at another (no relaying a
// member's handshake to a third node).

// NonceLen is the length of each side's nonce; ProofLen of each proof.
const (
	NonceLen = 32
	ProofLen = sha256.Size
	// challengeLen is the acceptor's answer to a header: StatusChallenge,
	// its nonce, its proof.
	challengeLen = 1 + NonceLen + ProofLen
)

// Proof roles: an acceptor's proof can never pass for a dialer's.
const (
	roleAcceptor = "trmx2 acceptor"
	roleDialer   = "trmx2 dialer"
)

// ErrPeerNotAuthenticated is wrapped by Dial's error when the node at the
// dialled address does not prove the cluster cookie: it has another
// cookie, or it is not the node advertised at that address.
var ErrPeerNotAuthenticated = errors.New("mux: peer did not prove the cluster cookie")

// newNonce returns NonceLen random bytes.
func newNonce() ([]byte, error) {
	b := make([]byte, NonceLen)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("mux: nonce: %w", err)
	}
	return b, nil
}

// proof is HMAC-SHA256 under cookie of role and the handshake's fields,
// each behind its length. It is pure.
func proof(cookie []byte, role, stream, target, dialer string, dialerNonce, acceptorNonce []byte) []byte {
	mac := hmac.New(sha256.New, cookie)
	for _, f := range [][]byte{[]byte(role), []byte(stream), []byte(target), []byte(dialer), dialerNonce, acceptorNonce} {
		mac.Write([]byte{byte(len(f) >> 8), byte(len(f))})
		mac.Write(f)
	}
	return mac.Sum(nil)
}
