package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"hash"
)

// Hashing algorithm names as RabbitMQ writes them in definitions.json.
const (
	HashSHA256 = "rabbit_password_hashing_sha256"
	HashSHA512 = "rabbit_password_hashing_sha512"
)

const saltLen = 4

// hashPassword returns salt+sha256(salt+password) with a random salt.
func hashPassword(password string) []byte {
	var salt [saltLen]byte
	if _, err := rand.Read(salt[:]); err != nil {
		panic("auth: crypto/rand failed: " + err.Error()) // never happens on supported platforms
	}
	return saltedHash(sha256.New(), salt[:], password)
}

func saltedHash(h hash.Hash, salt []byte, password string) []byte {
	h.Write(salt)
	h.Write([]byte(password))
	out := make([]byte, 0, saltLen+h.Size())
	out = append(out, salt...)
	return h.Sum(out)
}

// decodeHash decodes a base64 password hash and names its algorithm by its
// length. The empty string is a user without a password.
func decodeHash(s string) ([]byte, string, error) {
	if s == "" {
		return nil, "", nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, "", ErrBadHash
	}
	switch len(b) - saltLen {
	case sha256.Size:
		return b, HashSHA256, nil
	case sha512.Size:
		return b, HashSHA512, nil
	}
	return nil, "", ErrBadHash
}

// dummyHash is compared against when the user does not exist, so that an
// unknown name costs as much as a wrong password.
var dummyHash = hashPassword("trident-dummy")

// checkPassword reports whether password matches the salted hash stored in
// h, in constant time for a given hash length. A nil hash (no password)
// and an empty password never match.
func checkPassword(h []byte, password string) bool {
	var hf hash.Hash
	switch len(h) - saltLen {
	case sha256.Size:
		hf = sha256.New()
	case sha512.Size:
		hf = sha512.New()
	default:
		return false
	}
	got := saltedHash(hf, h[:saltLen], password)
	return subtle.ConstantTimeCompare(got, h) == 1 && password != ""
}
