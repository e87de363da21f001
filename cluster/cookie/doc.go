// Package cookie keeps the cluster's shared secret in a file, as RabbitMQ
// keeps its Erlang cookie: the first node started without a configured
// cookie generates one (32 random bytes, base64url, 43 characters) into
// the file, and every later start reads it back.
//
// # What it guarantees
//
//   - A cookie is never empty: an empty (or blank) file is an error, not
//     "no authentication".
//   - A new file is created with mode 0600 and appears whole or not at
//     all: it is written and synced under a temporary name in the same
//     directory, then linked to its name, which fails if another process
//     created the file meanwhile (that one's cookie is then read and
//     used). Where the file system has no hard links it is created with
//     O_EXCL instead.
//   - An existing file is never rewritten. Surrounding white space (a
//     trailing newline from an editor) is not part of the cookie.
//   - Load reports whether the file is readable by group or others, so
//     the caller can warn.
package cookie
