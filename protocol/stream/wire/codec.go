package wire

import (
	"errors"
	"fmt"
)

// Command keys. A response carries its request's key with ResponseBit set.
const (
	KeyDeclarePublisher        uint16 = 0x0001
	KeyPublish                 uint16 = 0x0002
	KeyPublishConfirm          uint16 = 0x0003
	KeyPublishError            uint16 = 0x0004
	KeyQueryPublisherSequence  uint16 = 0x0005
	KeyDeletePublisher         uint16 = 0x0006
	KeySubscribe               uint16 = 0x0007
	KeyDeliver                 uint16 = 0x0008
	KeyCredit                  uint16 = 0x0009
	KeyStoreOffset             uint16 = 0x000a
	KeyQueryOffset             uint16 = 0x000b
	KeyUnsubscribe             uint16 = 0x000c
	KeyCreate                  uint16 = 0x000d
	KeyDelete                  uint16 = 0x000e
	KeyMetadata                uint16 = 0x000f
	KeyMetadataUpdate          uint16 = 0x0010
	KeyPeerProperties          uint16 = 0x0011
	KeySaslHandshake           uint16 = 0x0012
	KeySaslAuthenticate        uint16 = 0x0013
	KeyTune                    uint16 = 0x0014
	KeyOpen                    uint16 = 0x0015
	KeyClose                   uint16 = 0x0016
	KeyHeartbeat               uint16 = 0x0017
	KeyRoute                   uint16 = 0x0018
	KeyPartitions              uint16 = 0x0019
	KeyConsumerUpdate          uint16 = 0x001a
	KeyExchangeCommandVersions uint16 = 0x001b
	KeyStreamStats             uint16 = 0x001c
	KeyCreateSuperStream       uint16 = 0x001d
	KeyDeleteSuperStream       uint16 = 0x001e

	ResponseBit uint16 = 0x8000
)

// Code is a response code. It is an error, so that a handler can return
// the code its answer carries.
type Code uint16

// Response codes.
const (
	OK                        Code = 0x01
	StreamDoesNotExist        Code = 0x02
	SubscriptionIDExists      Code = 0x03
	SubscriptionIDNotExist    Code = 0x04
	StreamAlreadyExists       Code = 0x05
	StreamNotAvailable        Code = 0x06
	SaslMechanismNotSupported Code = 0x07
	AuthenticationFailure     Code = 0x08
	SaslError                 Code = 0x09
	SaslChallenge             Code = 0x0a
	AuthenticationLoopback    Code = 0x0b
	VHostAccessFailure        Code = 0x0c
	UnknownFrame              Code = 0x0d
	FrameTooLarge             Code = 0x0e
	InternalError             Code = 0x0f
	AccessRefused             Code = 0x10
	PreconditionFailed        Code = 0x11
	PublisherDoesNotExist     Code = 0x12
	NoOffset                  Code = 0x13
)

var codeNames = map[Code]string{
	OK: "ok", StreamDoesNotExist: "stream does not exist", SubscriptionIDExists: "subscription id already exists",
	SubscriptionIDNotExist: "subscription id does not exist", StreamAlreadyExists: "stream already exists",
	StreamNotAvailable: "stream not available", SaslMechanismNotSupported: "sasl mechanism not supported",
	AuthenticationFailure: "authentication failure", SaslError: "sasl error", SaslChallenge: "sasl challenge",
	AuthenticationLoopback: "sasl authentication failure loopback", VHostAccessFailure: "virtual host access failure",
	UnknownFrame: "unknown frame", FrameTooLarge: "frame too large", InternalError: "internal error",
	AccessRefused: "access refused", PreconditionFailed: "precondition failed",
	PublisherDoesNotExist: "publisher does not exist", NoOffset: "no offset",
}

func (c Code) Error() string {
	if n, ok := codeNames[c]; ok {
		return "stream: " + n
	}
	return fmt.Sprintf("stream: response code %#x", uint16(c))
}

// Offset specification types (Subscribe).
const (
	OffsetFirst     uint16 = 1
	OffsetLast      uint16 = 2
	OffsetNext      uint16 = 3
	OffsetOffset    uint16 = 4
	OffsetTimestamp uint16 = 5
)

// Errors of ReadFrame and Decode.
var (
	// ErrFrameTooLarge: a frame's size is over the reader's bound.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrMalformed: a frame's fields do not fit its size.
	ErrMalformed = errors.New("wire: malformed frame")
)

// UnknownKeyError is a frame whose key this codec does not know (or one
// only a server sends). Corr is its correlation id when the frame has room
// for one (0 otherwise).
type UnknownKeyError struct {
	Key  uint16
	Corr uint32
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("wire: unknown command key %#04x", e.Key)
}

// KV is a string pair (peer and connection properties, arguments).
type KV struct{ Key, Value string }

// Frames a client sends. Byte slices alias the decoded payload.
type (
	PeerProperties struct {
		Corr  uint32
		Props []KV
	}
	SaslHandshake    struct{ Corr uint32 }
	SaslAuthenticate struct {
		Corr      uint32
		Mechanism string
		Data      []byte
	}
	// Tune is the client's answer to the server's Tune (with the response
	// bit, as the Go client sends it, or without).
	Tune struct {
		FrameMax, Heartbeat uint32
	}
	Open struct {
		Corr  uint32
		VHost string
	}
	// Close is a close request (from either side).
	Close struct {
		Corr   uint32
		Code   Code
		Reason string
	}
	// CloseResponse answers a Close the server sent.
	CloseResponse struct {
		Corr uint32
		Code Code
	}
	Heartbeat        struct{}
	DeclarePublisher struct {
		Corr      uint32
		ID        uint8
		Reference string
		Stream    string
	}
	// Publish carries messages (version 2: each with a filter value).
	Publish struct {
		Version  uint16
		ID       uint8
		Messages []PublishedMessage
	}
	PublishedMessage struct {
		ID     uint64
		Filter string
		Data   []byte
	}
	QueryPublisherSequence struct {
		Corr      uint32
		Reference string
		Stream    string
	}
	DeletePublisher struct {
		Corr uint32
		ID   uint8
	}
	Subscribe struct {
		Corr       uint32
		ID         uint8
		Stream     string
		OffsetType uint16
		Offset     uint64 // an offset, or (OffsetTimestamp) an int64 of ms since the epoch
		Credit     uint16
		Props      []KV
	}
	Credit struct {
		ID     uint8
		Credit uint16
	}
	StoreOffset struct {
		Reference string
		Stream    string
		Offset    uint64
	}
	QueryOffset struct {
		Corr      uint32
		Reference string
		Stream    string
	}
	Unsubscribe struct {
		Corr uint32
		ID   uint8
	}
	Create struct {
		Corr   uint32
		Stream string
		Args   []KV
	}
	Delete struct {
		Corr   uint32
		Stream string
	}
	Metadata struct {
		Corr    uint32
		Streams []string
	}
	ExchangeCommandVersions struct {
		Corr     uint32
		Commands []CommandVersion
	}
	CommandVersion struct{ Key, Min, Max uint16 }
	StreamStats    struct {
		Corr   uint32
		Stream string
	}
	Route struct {
		Corr        uint32
		RoutingKey  string
		SuperStream string
	}
	Partitions struct {
		Corr        uint32
		SuperStream string
	}
	// ConsumerUpdateResponse answers the server's ConsumerUpdate.
	ConsumerUpdateResponse struct {
		Corr       uint32
		Code       Code
		OffsetType uint16
		Offset     uint64
	}
	CreateSuperStream struct {
		Corr        uint32
		Name        string
		Partitions  []string
		BindingKeys []string
		Args        []KV
	}
	DeleteSuperStream struct {
		Corr uint32
		Name string
	}
)

// Frame is one of the client frames above.
type Frame interface{ key() uint16 }

func (PeerProperties) key() uint16          { return KeyPeerProperties }
func (SaslHandshake) key() uint16           { return KeySaslHandshake }
func (SaslAuthenticate) key() uint16        { return KeySaslAuthenticate }
func (Tune) key() uint16                    { return KeyTune }
func (Open) key() uint16                    { return KeyOpen }
func (Close) key() uint16                   { return KeyClose }
func (CloseResponse) key() uint16           { return KeyClose | ResponseBit }
func (Heartbeat) key() uint16               { return KeyHeartbeat }
func (DeclarePublisher) key() uint16        { return KeyDeclarePublisher }
func (Publish) key() uint16                 { return KeyPublish }
func (QueryPublisherSequence) key() uint16  { return KeyQueryPublisherSequence }
func (DeletePublisher) key() uint16         { return KeyDeletePublisher }
func (Subscribe) key() uint16               { return KeySubscribe }
func (Credit) key() uint16                  { return KeyCredit }
func (StoreOffset) key() uint16             { return KeyStoreOffset }
func (QueryOffset) key() uint16             { return KeyQueryOffset }
func (Unsubscribe) key() uint16             { return KeyUnsubscribe }
func (Create) key() uint16                  { return KeyCreate }
func (Delete) key() uint16                  { return KeyDelete }
func (Metadata) key() uint16                { return KeyMetadata }
func (ExchangeCommandVersions) key() uint16 { return KeyExchangeCommandVersions }
func (StreamStats) key() uint16             { return KeyStreamStats }
func (Route) key() uint16                   { return KeyRoute }
func (Partitions) key() uint16              { return KeyPartitions }
func (ConsumerUpdateResponse) key() uint16  { return KeyConsumerUpdate | ResponseBit }
func (CreateSuperStream) key() uint16       { return KeyCreateSuperStream }
func (DeleteSuperStream) key() uint16       { return KeyDeleteSuperStream }

// Key returns f's command key (with ResponseBit for a response).
func Key(f Frame) uint16 { return f.key() }

// Corr returns the correlation id of a request, 0 for a frame without one.
func Corr(f Frame) uint32 {
	switch f := f.(type) {
	case PeerProperties:
		return f.Corr
	case SaslHandshake:
		return f.Corr
	case SaslAuthenticate:
		return f.Corr
	case Open:
		return f.Corr
	case Close:
		return f.Corr
	case DeclarePublisher:
		return f.Corr
	case QueryPublisherSequence:
		return f.Corr
	case DeletePublisher:
		return f.Corr
	case Subscribe:
		return f.Corr
	case QueryOffset:
		return f.Corr
	case Unsubscribe:
		return f.Corr
	case Create:
		return f.Corr
	case Delete:
		return f.Corr
	case Metadata:
		return f.Corr
	case ExchangeCommandVersions:
		return f.Corr
	case StreamStats:
		return f.Corr
	case Route:
		return f.Corr
	case Partitions:
		return f.Corr
	case CreateSuperStream:
		return f.Corr
	case DeleteSuperStream:
		return f.Corr
	}
	return 0
}
