// Package wire is a pure AMQP 0-9-1 codec: bytes in, typed frames, methods,
// content headers and field tables out, or a typed *Error. It opens no
// socket, takes no lock and knows nothing of queues; it uses only the
// standard library and the core's table value types (exchange/headers, a
// leaf).
//
// # API summary
//
// Frames (frame.go, write.go):
//
//	const ProtocolHeader = "AMQP\x00\x00\x09\x01"
//	func CheckProtocolHeader(h []byte) error                       // ErrBadProtocolHeader
//	type Frame struct { Type uint8; Channel uint16; Payload []byte } // FrameMethod, FrameHeader, FrameBody, FrameHeartbeat
//	func ReadFrame(r *bufio.Reader, maxSize uint32, buf []byte) (Frame, error)
//	func ParseFrame(b []byte, maxSize uint32) (f Frame, n int, err error)
//	func AppendFrame(b []byte, typ uint8, channel uint16, payload []byte) []byte
//	func AppendMethodFrame(b []byte, channel uint16, m Method) ([]byte, error)
//	func AppendHeaderFrame(b []byte, channel uint16, bodySize uint64, p *Properties) ([]byte, error)
//	func AppendHeartbeat(b []byte) []byte
//	func WriteMethod(w *bufio.Writer, channel uint16, m Method) error
//	func WriteContent(w *bufio.Writer, channel uint16, m Method, p *Properties, body []byte, frameMax uint32) error
//	func WriteFrame(w *bufio.Writer, f Frame) error
//	func WriteHeartbeat(w *bufio.Writer) error
//
// Methods (method.go, methods_gen.go): one struct per method of the
// specification and RabbitMQ's extensions, named class + method in
// CamelCase (ConnectionStartOK, QueueDeclare, BasicPublish, BasicDeliver,
// BasicNack, ConfirmSelect, ExchangeBind, ConnectionBlocked,
// ConnectionUpdateSecret, ...), with constants ClassBasic, MethodBasicPublish,
// and so on. Reserved fields are not exposed; connection.close and
// channel.close name the failing method ReplyClassID and ReplyMethodID.
//
//	type Method interface {
//		ClassID() uint16; MethodID() uint16; Name() string // "basic.publish"
//		HasContent() bool; Sync() bool
//		AppendArgs(b []byte) ([]byte, error); DecodeArgs(args []byte) error
//	}
//	func DecodeMethod(payload []byte) (Method, error)
//	func SplitMethod(payload []byte) (classID, methodID uint16, args []byte, err error)
//	func AppendMethod(b []byte, m Method) ([]byte, error)
//
// Content headers (properties.go):
//
//	type Properties struct { Flags uint16; ContentType, ContentEncoding string; Headers Table;
//		DeliveryMode, Priority uint8; CorrelationID, ReplyTo, Expiration, MessageID string;
//		Timestamp time.Time; Type, UserID, AppID, ClusterID string }
//	func DecodeContentHeader(payload []byte) (classID uint16, bodySize uint64, p Properties, err error)
//	func AppendContentHeader(b []byte, classID uint16, bodySize uint64, p *Properties) ([]byte, error)
//
// Field tables (table.go):
//
//	type Table = headers.Table     // map[string]any
//	type Decimal = headers.Decimal // struct { Scale uint8; Value int32 }
//	func DecodeTable(b []byte) (Table, error)
//	func AppendTable(b []byte, t Table) ([]byte, error)
//
// Errors and reply codes (errors.go, methods_gen.go):
//
//	type Error struct { Code uint16; Text string; ConnectionScope bool; ClassID, MethodID uint16 }
//	func NewConnectionError(code uint16, format string, args ...any) *Error
//	func NewChannelError(code uint16, format string, args ...any) *Error
//	func ReplyName(code uint16) string // "NOT_FOUND"
//	func IsHardError(code uint16) bool
//	const ReplySuccess, ContentTooLarge, NoRoute, NoConsumers, ConnectionForced, InvalidPath,
//		AccessRefused, NotFound, ResourceLocked, PreconditionFailed, FrameError, SyntaxError,
//		CommandInvalid, ChannelError, UnexpectedFrame, ResourceError, NotAllowed,
//		NotImplemented, InternalError uint16
//
// # Guarantees
//
// Decoding never panics and never allocates more than its input justifies:
// a length prefix beyond the remaining input is an error, tables nest at
// most MaxTableDepth deep, and ReadFrame refuses a frame larger than
// maxSize before reading it. Every decode failure is a connection-scope
// *Error whose Code is the reply code to close the connection with:
// FrameError (bad frame-end, oversized frame), SyntaxError (malformed
// method arguments, content header or table, trailing bytes),
// CommandInvalid (unknown class or method). Decoded values do not alias
// the input, except Frame.Payload, which aliases the buffer given to
// ReadFrame or ParseFrame.
//
// Whatever decodes re-encodes to input that decodes to the same value; the
// fuzz targets check this.
//
// Writing a method or a whole message (WriteContent) into a bufio.Writer
// allocates nothing: frames are encoded straight into the writer's free
// buffer. Decoding a method allocates the method struct and its strings;
// to save the struct on a hot path, split the payload with SplitMethod and
// call DecodeArgs on a value you reuse.
//
// methods_gen.go is generated from the specification XML shipped with
// github.com/rabbitmq/amqp091-go by ./gen; do not edit it.
package wire

//go:generate go run ./gen
