package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

// Streams in the management API: GET /api/queues/{vhost}/{name} of a
// stream has "type": "stream" (as RabbitMQ) and a "stream" object (our
// extension) with its retention, segments, first and last offset and
// timestamp, and its named consumers' stored offsets and lag.
//
// Browse (our extension beside RabbitMQ's shapes):
//
//	GET /api/queues/{vhost}/{name}/browse?offset=N&timestamp=T&count=20&scan=1000
//	    &routing_key=K&header=H&value=V&body=S&truncate=N&encoding=auto|base64
//
// looks at messages without consuming them: a stream from offset N or
// from time T (RFC 3339, or unix milliseconds), a queue from position N
// of its head (nothing is taken, acked or flagged redelivered). It scans
// at most scan messages (at most 100000) and returns the first count (at
// most 1000) that match every given filter: routing key equal to K, a
// header H (whose value formats as V, if given), a body containing S.
// The answer: {"messages": [...], "next": N, "scanned": n, "end": bool};
// ask again from "next" for the following page.

type streamJSON struct {
	Messages       int64                `json:"messages"`
	Bytes          int64                `json:"bytes"`
	Segments       int                  `json:"segments"`
	FirstOffset    uint64               `json:"first_offset"`
	LastOffset     int64                `json:"last_offset"`
	FirstTimestamp *string              `json:"first_timestamp"`
	LastTimestamp  *string              `json:"last_timestamp"`
	MaxAge         string               `json:"max_age,omitempty"`
	MaxLengthBytes int64                `json:"max_length_bytes,omitempty"`
	SegmentBytes   int64                `json:"max_segment_size_bytes"`
	Consumers      []streamConsumerJSON `json:"consumer_offsets"`
}

type streamConsumerJSON struct {
	Name   string `json:"name"`
	Offset uint64 `json:"offset"`
	Lag    int64  `json:"lag"`
	Active bool   `json:"active"`
}

func apiTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format("2006-01-02T15:04:05.000+00:00")
	return &s
}

func streamInfoJSON(q *exchange.Queue) *streamJSON {
	si, ok := q.StreamInfo()
	if !ok {
		return nil
	}
	j := &streamJSON{Messages: si.Messages, Bytes: si.Bytes, Segments: si.Segments,
		FirstOffset: si.FirstOffset, LastOffset: si.LastOffset,
		FirstTimestamp: apiTime(si.FirstTimestamp), LastTimestamp: apiTime(si.LastTimestamp),
		MaxAge: si.MaxAge, MaxLengthBytes: si.MaxBytes, SegmentBytes: si.SegmentBytes,
		Consumers: []streamConsumerJSON{}}
	for _, c := range si.Consumers {
		j.Consumers = append(j.Consumers, streamConsumerJSON{Name: c.Name, Offset: c.Offset, Lag: c.Lag, Active: c.Active})
	}
	return j
}

// browseQueue is GET /api/queues/{vhost}/{name}/browse.
func (s *Server) browseQueue(w http.ResponseWriter, r *http.Request, u *auth.User) {
	_, q, ok := s.queueFor(w, r, u, s.readVHost, auth.Read)
	if !ok {
		return
	}
	qv := r.URL.Query()
	num := func(key string, def int64) (int64, bool) {
		s := qv.Get(key)
		if s == "" {
			return def, true
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			badRequest(w, key+" must be a non-negative integer")
			return 0, false
		}
		return n, true
	}
	var o exchange.BrowseOpts
	from, ok1 := num("offset", 0)
	count, ok2 := num("count", 20)
	scan, ok3 := num("scan", 1000)
	truncate, ok4 := num("truncate", -1)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return
	}
	if qv.Get("truncate") == "" {
		truncate = -1
	}
	o.From, o.Count, o.Scan = uint64(from), int(min(count, exchange.BrowseMaxCount)), int(min(scan, exchange.BrowseMaxScan))
	if ts := qv.Get("timestamp"); ts != "" {
		if ms, err := strconv.ParseInt(ts, 10, 64); err == nil {
			o.FromTime = time.UnixMilli(ms)
		} else if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			o.FromTime = t
		} else {
			badRequest(w, "timestamp must be RFC 3339 or unix milliseconds")
			return
		}
	}
	o.Filter = exchange.BrowseFilter{RoutingKey: qv.Get("routing_key"), Header: qv.Get("header"),
		Value: qv.Get("value"), Body: qv.Get("body")}
	encoding := qv.Get("encoding")
	if encoding == "" {
		encoding = "auto"
	}
	if encoding != "auto" && encoding != "base64" {
		badRequest(w, "Unknown encoding: "+encoding)
		return
	}
	p, err := q.Browse(o)
	if err != nil {
		coreError(w, err)
		return
	}
	msgs := make([]map[string]any, 0, len(p.Messages))
	for _, m := range p.Messages {
		msgs = append(msgs, browsedJSON(m, q.IsStream(), encoding, int(truncate)))
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": msgs, "next": p.Next, "scanned": p.Scanned, "end": p.End})
}

func browsedJSON(m exchange.BrowsedMessage, stream bool, encoding string, truncate int) map[string]any {
	payload, enc, n := payloadJSON(m.Msg.Body, encoding, truncate)
	j := map[string]any{
		"exchange": m.Msg.Exchange, "routing_key": m.Msg.RoutingKey,
		"properties": propertiesJSON(&m.Msg.Props), "payload": payload, "payload_bytes": n,
		"payload_encoding": enc, "enqueued": apiTime(m.Enqueued), // null if unknown
	}
	if stream {
		j["offset"] = m.Position
	} else {
		j["position"] = m.Position
	}
	return j
}
