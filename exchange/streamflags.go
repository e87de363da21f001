package exchange

import (
	"errors"
)

// The feature flags of the stream log's record formats, and the named
// producers' sequence as the front ends ask it (the table itself is the
// log's: exchange/streamlog, writers.go).

// streamChunksFlag is the cluster feature flag of chunk records
// (cluster/featureflags.StreamChunks).
const streamChunksFlag = "stream_chunks"

// StreamChunksEnabled reports whether streams may write chunk records:
// always on a node alone, in a cluster once stream_chunks is enabled.
func (v *VHost) StreamChunksEnabled() bool {
	g, ok := v.b.cluster.(featureGate)
	return !ok || g.FeatureEnabled(streamChunksFlag)
}

// ErrNoStreamCopy: QueryPublisherSequence on a node that holds no copy of
// a clustered stream (not one of its members). It has nothing to read the
// answer from, and a wrong one (0) would make a client number new
// messages as duplicates, which the leader would drop.
var ErrNoStreamCopy = errors.New("exchange: this node holds no copy of the stream")

// streamWritersFlag is the cluster feature flag of stream records with
// a named producer or a filter value (cluster/featureflags.StreamWriters).
const streamWritersFlag = "stream_writers"

// ErrStreamWritersDisabled is StreamPublisherSequence's answer while the
// cluster has not enabled the stream_writers feature flag: a node of an
// older release could not read a named producer's records.
var ErrStreamWritersDisabled = errorf(KindPreconditionFailed, "stream deduplication needs the feature flag %s enabled (every node of the cluster upgraded)", streamWritersFlag)

// StreamWritersEnabled reports whether messages may carry a stream
// producer or filter value (SetStreamWriter, SetStreamFilter): always on
// a node alone, in a cluster once stream_writers is enabled.
func (v *VHost) StreamWritersEnabled() bool {
	g, ok := v.b.cluster.(featureGate)
	return !ok || g.FeatureEnabled(streamWritersFlag)
}

// StreamPublisherSequence returns the highest publishing id of the stream
// producer named ref that stream q holds (RabbitMQ's
// QueryPublisherSequence), 0 if none. On a member of a clustered stream
// that does not lead it, what its copy holds (which lags the leader's by
// the time its group takes to apply a commit here); on a node without a
// copy, ErrNoStreamCopy.
func (q *Queue) StreamPublisherSequence(ref string) (uint64, error) {
	if q.st == nil {
		return 0, errorf(KindPreconditionFailed, "queue '%s' in vhost '%s' is not a stream", q.name, q.vh.name)
	}
	if !q.vh.StreamWritersEnabled() {
		return 0, ErrStreamWritersDisabled
	}
	if q.st.readsRemotely() {
		return 0, ErrNoStreamCopy
	}
	return q.st.log.WriterSeq(ref)
}
