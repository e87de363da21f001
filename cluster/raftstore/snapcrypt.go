package raftstore

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"

	"github.com/trident-broker/trident/store"
)

// With a key (Options.EncryptionKey) the groups' snapshot files, which
// hashicorp/raft's FileSnapshotStore writes beside the DB, are encrypted
// too (DB.Snapshots wraps the store). A snapshot's state file is
//
//	file  = magic:8 salt:32 check:16 chunk+
//	chunk = AES-256-GCM(fileKey, nonce(i, last), plain)   (len(plain)+16 bytes)
//
// fileKey and check are derived from the key and the file's random salt
// (HKDF-SHA-256), so every file has its own key and check tells a wrong
// key from a damaged file. Every chunk but the last holds snapChunk bytes
// of plain text, the last 0 to snapChunk; the nonce is the chunk's number
// and whether it is the last, so chunks cannot be reordered, dropped or
// cut off unnoticed. The plain size follows from the file's (plainSize):
// Raft sends a snapshot's size before its bytes.

const (
	snapMagic    = "\xffTRSNAP\x01"
	snapSaltLen  = 32
	snapCheckLen = 16
	snapHeader   = len(snapMagic) + snapSaltLen + snapCheckLen
	snapChunk    = 64 << 10
	snapTag      = 16
)

// ErrSnapshotCorrupt: an encrypted snapshot's file is damaged (a chunk
// does not authenticate, or the file is cut short).
var ErrSnapshotCorrupt = errors.New("raftstore: encrypted snapshot is damaged")

// snapKeys derives a file's AEAD and key check from key and salt.
func snapKeys(key, salt []byte) (cipher.AEAD, []byte, error) {
	fk, err := hkdf.Key(sha256.New, key, salt, "trident raft snapshot v1", 32)
	if err != nil {
		return nil, nil, err
	}
	check, err := hkdf.Key(sha256.New, key, salt, "trident raft snapshot v1 check", snapCheckLen)
	if err != nil {
		return nil, nil, err
	}
	blk, err := aes.NewCipher(fk)
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, nil, err
	}
	return aead, check, nil
}

func snapNonce(nonce []byte, i uint64, last bool) []byte {
	clear(nonce)
	binary.BigEndian.PutUint64(nonce, i)
	if last {
		nonce[len(nonce)-1] = 1
	}
	return nonce
}

// plainSize is the plain text size of an encrypted state file of size n.
func plainSize(n int64) int64 {
	n -= int64(snapHeader)
	if n < snapTag {
		return 0
	}
	chunks := (n + snapChunk + snapTag - 1) / (snapChunk + snapTag)
	return n - chunks*snapTag
}

// encWriter encrypts what is written to it into w; Close writes the last
// chunk (it does not close w).
type encWriter struct {
	w     io.Writer
	aead  cipher.AEAD
	nonce []byte
	buf   []byte // plain text not yet sealed
	out   []byte
	n     uint64 // chunks written
	err   error
}

func newEncWriter(w io.Writer, key []byte) (*encWriter, error) {
	hdr := make([]byte, snapHeader)
	copy(hdr, snapMagic)
	salt := hdr[len(snapMagic) : len(snapMagic)+snapSaltLen]
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	aead, check, err := snapKeys(key, salt)
	if err != nil {
		return nil, err
	}
	copy(hdr[len(snapMagic)+snapSaltLen:], check)
	if _, err := w.Write(hdr); err != nil {
		return nil, err
	}
	return &encWriter{w: w, aead: aead, nonce: make([]byte, aead.NonceSize()),
		buf: make([]byte, 0, snapChunk), out: make([]byte, 0, snapChunk+snapTag)}, nil
}

// Write returns len(p) when it succeeds: the plain text taken.
func (e *encWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n := len(p)
	for len(p) > 0 {
		if len(e.buf) == snapChunk {
			// A full chunk is sealed only once more follows: the last
			// chunk is sealed as the last by Close.
			if e.err = e.seal(false); e.err != nil {
				return 0, e.err
			}
		}
		k := min(snapChunk-len(e.buf), len(p))
		e.buf = append(e.buf, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

func (e *encWriter) seal(last bool) error {
	e.out = e.aead.Seal(e.out[:0], snapNonce(e.nonce, e.n, last), e.buf, nil)
	e.n++
	e.buf = e.buf[:0]
	_, err := e.w.Write(e.out)
	return err
}

var errWriterClosed = errors.New("raftstore: snapshot writer closed")

// Close seals the last chunk; closing again does nothing.
func (e *encWriter) Close() error {
	if e.err == errWriterClosed {
		return nil
	}
	if e.err != nil {
		return e.err
	}
	if e.err = e.seal(true); e.err != nil {
		return e.err
	}
	e.err = errWriterClosed
	return nil
}

// snapState is what a state file's first bytes say about key.
type snapState int

const (
	snapPlain    snapState = iota // not encrypted
	snapOpens                     // encrypted with key
	snapOtherKey                  // encrypted with another key (or key is empty)
)

// readSnapHeader reads a state file's header from r, returning the
// file's AEAD when key opens it. Fewer bytes than a header, or no magic,
// is plain text (r has consumed them: the caller rereads the file).
func readSnapHeader(r io.Reader, key []byte) (snapState, cipher.AEAD, error) {
	hdr := make([]byte, snapHeader)
	if _, err := io.ReadFull(r, hdr); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return snapPlain, nil, nil
		}
		return 0, nil, err
	}
	if string(hdr[:len(snapMagic)]) != snapMagic {
		return snapPlain, nil, nil
	}
	if len(key) == 0 {
		return snapOtherKey, nil, nil
	}
	aead, check, err := snapKeys(key, hdr[len(snapMagic):len(snapMagic)+snapSaltLen])
	if err != nil {
		return 0, nil, err
	}
	if subtle.ConstantTimeCompare(check, hdr[len(snapMagic)+snapSaltLen:]) != 1 {
		return snapOtherKey, nil, nil
	}
	return snapOpens, aead, nil
}

// decReader decrypts the chunks after a header.
type decReader struct {
	r     *bufio.Reader
	aead  cipher.AEAD
	nonce []byte
	in    []byte
	plain []byte // decrypted, not yet read
	n     uint64
	done  bool // the last chunk was read
}

// newDecReader returns the plain text of the encrypted state file in r,
// which key must open (store.ErrNotEncrypted, store.ErrEncryptionKey).
func newDecReader(r io.Reader, key []byte) (*decReader, error) {
	br := bufio.NewReaderSize(r, snapChunk+snapTag+1)
	st, aead, err := readSnapHeader(br, key)
	switch {
	case err != nil:
		return nil, err
	case st == snapPlain:
		return nil, store.ErrNotEncrypted
	case st == snapOtherKey:
		return nil, store.ErrEncryptionKey
	}
	return &decReader{r: br, aead: aead, nonce: make([]byte, aead.NonceSize()), in: make([]byte, snapChunk+snapTag)}, nil
}

func (d *decReader) Read(p []byte) (int, error) {
	for len(d.plain) == 0 {
		if d.done {
			return 0, io.EOF
		}
		if err := d.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, d.plain)
	d.plain = d.plain[n:]
	return n, nil
}

func (d *decReader) next() error {
	n, err := io.ReadFull(d.r, d.in)
	last := false
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		last = true
	case errors.Is(err, io.EOF):
		return fmt.Errorf("%w: cut short after chunk %d", ErrSnapshotCorrupt, d.n)
	case err != nil:
		return err
	default:
		if _, perr := d.r.Peek(1); errors.Is(perr, io.EOF) {
			last = true
		} else if perr != nil {
			return perr
		}
	}
	plain, err := d.aead.Open(d.in[:0], snapNonce(d.nonce, d.n, last), d.in[:n], nil)
	if err != nil {
		return fmt.Errorf("%w: chunk %d", ErrSnapshotCorrupt, d.n)
	}
	d.n++
	d.plain, d.done = plain, last
	return nil
}

// Snapshots returns inner with its snapshots encrypted with the DB's key:
// inner itself when the DB has none (or d is nil). groups.Host wraps
// every group's FileSnapshotStore with it.
func (d *DB) Snapshots(inner raft.SnapshotStore) raft.SnapshotStore {
	if d == nil || len(d.key) == 0 {
		return inner
	}
	return &encSnapshots{inner: inner, key: d.key}
}

// encSnapshots is a snapshot store whose snapshots inner keeps encrypted.
type encSnapshots struct {
	inner raft.SnapshotStore
	key   []byte
}

func (s *encSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.inner.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	w, err := newEncWriter(sink, s.key)
	if err != nil {
		_ = sink.Cancel()
		return nil, fmt.Errorf("raftstore: encrypt snapshot: %w", err)
	}
	return &encSink{SnapshotSink: sink, w: w}, nil
}

// List returns inner's snapshots with their plain sizes.
func (s *encSnapshots) List() ([]*raft.SnapshotMeta, error) {
	list, err := s.inner.List()
	if err != nil {
		return nil, err
	}
	out := make([]*raft.SnapshotMeta, len(list))
	for i, m := range list {
		c := *m
		c.Size = plainSize(m.Size)
		out[i] = &c
	}
	return out, nil
}

// Open returns the snapshot's plain text and plain size.
func (s *encSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.inner.Open(id)
	if err != nil {
		return nil, nil, err
	}
	d, err := newDecReader(rc, s.key)
	if err != nil {
		_ = rc.Close()
		return nil, nil, fmt.Errorf("raftstore: snapshot %s: %w", id, err)
	}
	m := *meta
	m.Size = plainSize(meta.Size)
	return &m, struct {
		io.Reader
		io.Closer
	}{d, rc}, nil
}

// encSink encrypts into the inner store's sink.
type encSink struct {
	raft.SnapshotSink
	w *encWriter
}

func (s *encSink) Write(p []byte) (int, error) { return s.w.Write(p) }

func (s *encSink) Close() error {
	if err := s.w.Close(); err != nil {
		_ = s.SnapshotSink.Cancel()
		return fmt.Errorf("raftstore: encrypt snapshot: %w", err)
	}
	return s.SnapshotSink.Close()
}
