// Package frame is Trident's STOMP 1.0/1.1/1.2 codec: bytes in, typed
// frames or a typed *Error out; frames in, bytes out. It opens no socket,
// takes no lock and knows nothing about queues.
//
// Parse decodes one frame from a byte slice and enforces Limits (frame
// size, header count, header line length, body size), so that a peer
// cannot make the server buffer more than Limits.MaxFrameSize bytes for one
// frame. Reader wraps Parse over an io.Reader with a buffer that grows to
// at most MaxFrameSize and never rescans a large body twice.
//
// Header escaping follows the version: 1.0 has none; 1.1 has \n, \c and \\;
// 1.2 adds \r. CONNECT, STOMP and CONNECTED frames are never escaped, as the
// 1.2 specification says. A header repeated in one frame keeps its first
// value (Frame.Get), as 1.2 requires. Heart-beats (a bare EOL between
// frames) are consumed by Parse and reported as a zero Command.
package frame
