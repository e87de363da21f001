package web

import (
	"encoding/base64"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/trident-broker/trident/auth"
	"github.com/trident-broker/trident/exchange"
)

type queueJSON struct {
	Name                string         `json:"name"`
	VHost               string         `json:"vhost"`
	Node                string         `json:"node"`
	Type                string         `json:"type"`
	State               string         `json:"state"`
	Durable             bool           `json:"durable"`
	AutoDelete          bool           `json:"auto_delete"`
	Exclusive           bool           `json:"exclusive"`
	Arguments           map[string]any `json:"arguments"`
	Consumers           int            `json:"consumers"`
	ConsumerCapacity    float64        `json:"consumer_capacity"`
	ConsumerUtilisation float64        `json:"consumer_utilisation"`
	lengthsJSON
	MessagesRAM                int64          `json:"messages_ram"`
	MessagesReadyRAM           int64          `json:"messages_ready_ram"`
	MessagesUnacknowledgedRAM  int64          `json:"messages_unacknowledged_ram"`
	MessagesPersistent         int64          `json:"messages_persistent"`
	MessageBytes               int64          `json:"message_bytes"`
	MessageBytesReady          int64          `json:"message_bytes_ready"`
	MessageBytesUnacknowledged int64          `json:"message_bytes_unacknowledged"`
	MessageBytesRAM            int64          `json:"message_bytes_ram"`
	MessagesPagedOut           int64          `json:"messages_paged_out"`
	MessageBytesPagedOut       int64          `json:"message_bytes_paged_out"`
	MessageStats               msgStatsJSON   `json:"message_stats"`
	IdleSince                  string         `json:"idle_since,omitempty"`
	ExclusiveConsumerTag       *string        `json:"exclusive_consumer_tag"`
	SingleActiveConsumerTag    *string        `json:"single_active_consumer_tag"`
	Policy                     *string        `json:"policy"`
	OperatorPolicy             *string        `json:"operator_policy"`
	EffectivePolicyDefinition  map[string]any `json:"effective_policy_definition"`
	HeadMessageTimestamp       *int64         `json:"head_message_timestamp"`
	// HeadMessageAgeSeconds (Trident) is how long the head message has
	// waited in this queue since it was enqueued, null when unknown.
	HeadMessageAgeSeconds *float64 `json:"head_message_age_seconds"`
	Memory                int64    `json:"memory"`
	// Quorum queues: the Raft leader and group members, as RabbitMQ.
	Leader  string   `json:"leader,omitempty"`
	Members []string `json:"members,omitempty"`
	// Streams: retention, segments, offsets, named consumers (streams.go).
	Stream *streamJSON `json:"stream,omitempty"`
	// Only on GET of one queue.
	ConsumerDetails *[]consumerJSON `json:"consumer_details,omitempty"`
	Incoming        *[]any          `json:"incoming,omitempty"`
	Deliveries      *[]any          `json:"deliveries,omitempty"`
}

func (s *Server) queueJSON(q *exchange.Queue) queueJSON {
	st := q.Status()
	args := q.Args()
	if args == nil {
		args = map[string]any{}
	}
	w := s.rates.queue(q)
	j := queueJSON{
		Name: q.Name(), VHost: q.VHost(), Node: s.node, Type: "classic", State: "running",
		Durable: q.Durable(), AutoDelete: q.AutoDelete(), Exclusive: q.Exclusive(), Arguments: args,
		Consumers:   st.Consumers,
		lengthsJSON: lengths(int64(st.Ready), int64(st.Unacked), w),
		MessagesRAM: int64(st.ReadyRAM + st.Unacked), MessagesReadyRAM: int64(st.ReadyRAM),
		MessagesUnacknowledgedRAM: int64(st.Unacked),
		MessageBytes:              st.ReadyBytes, MessageBytesReady: st.ReadyBytes, MessageBytesRAM: st.BytesRAM,
		MessagesPagedOut: int64(st.Ready - st.ReadyRAM), MessageBytesPagedOut: st.ReadyBytes - st.BytesRAM,
		Memory:                    st.Memory,
		MessageStats:              messageStats(kindQueue, q.MsgStats(), w),
		EffectivePolicyDefinition: map[string]any{},
	}
	if name, def := q.Policy(); name != "" {
		j.Policy, j.EffectivePolicyDefinition = &name, def
	}
	if name, def := q.OperatorPolicy(); name != "" {
		j.OperatorPolicy, j.EffectivePolicyDefinition = &name, withOperatorPolicy(j.EffectivePolicyDefinition, def)
	}
	j.HeadMessageTimestamp, j.HeadMessageAgeSeconds = headJSON(st, time.Now())
	if q.Quorum() {
		j.Type = "quorum"
	}
	if q.IsStream() {
		j.Type, j.Stream = "stream", streamInfoJSON(q)
	}
	if ql, ok := s.cluster.(QueueLocator); ok {
		node, members := ql.QueueNode(q)
		if node != "" || q.Replicated() {
			j.Node = node
		}
		if q.Replicated() {
			j.Leader, j.Members = node, members
		}
	}
	if st.Consumers > 0 {
		j.ConsumerCapacity, j.ConsumerUtilisation = 1, 1
	} else if st.LastUsed != 0 {
		j.IdleSince = time.Unix(0, st.LastUsed).UTC().Format("2006-01-02T15:04:05.000+00:00")
	}
	return j
}

func queueName(q *exchange.Queue) string { return q.Name() }

// queueKey sorts queues by their lengths without rendering them.
func queueKey(q *exchange.Queue, field string) (any, bool) {
	switch field {
	case "messages", "messages_ready", "messages_unacknowledged", "consumers":
		st := q.Status()
		switch field {
		case "messages":
			return st.Ready + st.Unacked, true
		case "messages_ready":
			return st.Ready, true
		case "messages_unacknowledged":
			return st.Unacked, true
		}
		return st.Consumers, true
	}
	return nil, false
}
func queueVHost(q *exchange.Queue) string { return q.VHost() }

func (s *Server) listQueues(w http.ResponseWriter, r *http.Request, u *auth.User) {
	var qs []*exchange.Queue
	for _, v := range s.visibleVHosts(u) {
		qs = append(qs, v.Queues()...)
	}
	respondList(w, r, listSpec[*exchange.Queue, queueJSON]{refs: qs, vhost: queueVHost, name: queueName, build: s.queueJSON, key: queueKey})
}

func (s *Server) listVHostQueues(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	respondList(w, r, listSpec[*exchange.Queue, queueJSON]{refs: v.Queues(), vhost: queueVHost, name: queueName, build: s.queueJSON, key: queueKey})
}

// findQueue looks a queue up for management: exclusive queues too.
func findQueue(v *exchange.VHost, name string) *exchange.Queue {
	for _, q := range v.Queues() {
		if q.Name() == name {
			return q
		}
	}
	return nil
}

// lookupQueue finds a queue by name, exclusive ones included, without
// walking every queue in the common case.
func lookupQueue(v *exchange.VHost, name string) *exchange.Queue {
	q, err := v.Queue(name, nil)
	if err == nil {
		return q
	}
	if exchange.KindOf(err) == exchange.KindNotFound {
		return nil
	}
	return findQueue(v, name) // exclusive to a connection
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	q := lookupQueue(v, pathValue(r, "name"))
	if q == nil {
		notFound(w)
		return
	}
	j := s.queueJSON(q)
	cd := consumersOf(q)
	empty := []any{}
	empty2 := []any{}
	j.ConsumerDetails, j.Incoming, j.Deliveries = &cd, &empty, &empty2
	writeJSON(w, http.StatusOK, j)
}

// putQueue declares a queue: 201 when created, 204 when it existed
// with the same properties, 400 when they differ.
func (s *Server) putQueue(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, body, ok := s.vhostBody(w, r, u)
	if !ok {
		return
	}
	name := pathValue(r, "name")
	args := tableField(body, "arguments")
	res, ok := s.do(w, v, u, exchange.QueueDeclare{Name: name, Opts: exchange.QueueOpts{Durable: boolField(body, "durable"),
		AutoDelete: boolField(body, "auto_delete"), Args: args}})
	if !ok {
		return
	}
	putStatus(w, !res.Queue.Created)
}

func (s *Server) deleteQueue(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, q, ok := s.queueFor(w, r, u, s.writeVHost, auth.Configure)
	if !ok {
		return
	}
	name := q.Name()
	qv := r.URL.Query()
	var owner any
	if q.Exclusive() {
		owner = q.Status().Owner // management may delete exclusive queues
	}
	if _, ok := s.do(w, v, u, exchange.QueueDelete{Name: name, IfUnused: qv.Get("if-unused") == "true", IfEmpty: qv.Get("if-empty") == "true", Owner: owner}); !ok {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// purgeQueue is DELETE /api/queues/{vhost}/{name}/contents.
func (s *Server) purgeQueue(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, q, ok := s.queueFor(w, r, u, s.writeVHost, auth.Read)
	if !ok {
		return
	}
	var owner any
	if q.Exclusive() {
		owner = q.Status().Owner // management may purge exclusive queues
	}
	if _, ok := s.do(w, v, u, exchange.QueuePurge{Name: q.Name(), Owner: owner}); !ok {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getMessages is POST /api/queues/{vhost}/{name}/get: takes up to count
// messages and acks, requeues or rejects them per ackmode.
func (s *Server) getMessages(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.writeVHost(w, r, u)
	if !ok {
		return
	}
	name := pathValue(r, "name")
	if err := s.permits(u, v.Name(), auth.Read, "queue", name); err != nil {
		writeError(w, http.StatusUnauthorized, "not_authorised", "ACCESS_REFUSED - "+err.Error())
		return
	}
	body, ok := readBody(w, r, "ackmode", "encoding")
	if !ok {
		return
	}
	ackmode := strField(body, "ackmode")
	encoding := strField(body, "encoding")
	var requeue, reject bool
	switch ackmode {
	case "ack_requeue_true", "reject_requeue_true":
		requeue = true
	case "ack_requeue_false":
	case "reject_requeue_false":
		reject = true
	default:
		badRequest(w, "Unknown ackmode: "+ackmode)
		return
	}
	if encoding != "auto" && encoding != "base64" {
		badRequest(w, "Unknown encoding: "+encoding)
		return
	}
	count := intField(body, "count", 1)
	truncate := intField(body, "truncate", -1)
	q := lookupQueue(v, name)
	if q == nil {
		notFound(w)
		return
	}
	if err := q.CheckGet(); err != nil {
		coreError(w, err)
		return
	}
	out := []map[string]any{}
	var seqs []uint64
	for i := 0; i < count; i++ {
		d, ok, err := q.Fetch(false)
		if err != nil && len(seqs) == 0 {
			coreError(w, err) // the queue's leader did not answer: not an empty queue
			return
		}
		if err != nil || !ok {
			break
		}
		seqs = append(seqs, d.Seq)
		out = append(out, messageJSON(d, encoding, truncate))
	}
	switch {
	case requeue:
		q.Reject(seqs, true)
	case reject:
		q.Reject(seqs, false)
	default:
		q.AckMany(seqs)
	}
	writeJSON(w, http.StatusOK, out)
}

func messageJSON(d exchange.Delivery, encoding string, truncate int) map[string]any {
	payload, enc, payloadBytes := payloadJSON(d.Msg.Body, encoding, truncate)
	return map[string]any{
		"payload_bytes":    payloadBytes,
		"redelivered":      d.Redelivered,
		"exchange":         d.Msg.Exchange,
		"routing_key":      d.Msg.RoutingKey,
		"message_count":    d.Remaining,
		"properties":       propertiesJSON(&d.Msg.Props),
		"payload":          payload,
		"payload_encoding": enc,
	}
}

// payloadJSON is a body as the API shows it: cut to truncate bytes (if
// not negative), as a string, or in base64 when asked or not UTF-8; n is
// the whole body's size.
func payloadJSON(body []byte, encoding string, truncate int) (payload, enc string, n int) {
	n = len(body)
	if truncate >= 0 && truncate < len(body) {
		body = body[:truncate]
	}
	if encoding == "base64" || !utf8.Valid(body) {
		return base64.StdEncoding.EncodeToString(body), "base64", n
	}
	return string(body), "string", n
}

// queueFor answers a request about the queue named in its path: the
// vhost (through vhost: readVHost or writeVHost), u's perm on the queue,
// the queue itself; on false the answer is written.
func (s *Server) queueFor(w http.ResponseWriter, r *http.Request, u *auth.User, vhost func(http.ResponseWriter, *http.Request, *auth.User) (*exchange.VHost, bool), perm auth.Perm) (*exchange.VHost, *exchange.Queue, bool) {
	v, ok := vhost(w, r, u)
	if !ok {
		return nil, nil, false
	}
	name := pathValue(r, "name")
	if err := s.permits(u, v.Name(), perm, "queue", name); err != nil {
		accessRefused(w)
		return nil, nil, false
	}
	q := lookupQueue(v, name)
	if q == nil {
		notFound(w)
		return nil, nil, false
	}
	return v, q, true
}

// propertiesJSON renders the properties that are set, as RabbitMQ does.
func propertiesJSON(p *exchange.Properties) map[string]any {
	m := map[string]any{}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("content_type", p.ContentType)
	set("content_encoding", p.ContentEncoding)
	set("correlation_id", p.CorrelationID)
	set("reply_to", p.ReplyTo)
	set("expiration", p.Expiration)
	set("message_id", p.MessageID)
	set("type", p.Type)
	set("user_id", p.UserID)
	set("app_id", p.AppID)
	if len(p.Headers) > 0 {
		m["headers"] = p.Headers
	}
	if p.DeliveryMode != 0 {
		m["delivery_mode"] = p.DeliveryMode
	}
	if p.Priority != 0 {
		m["priority"] = p.Priority
	}
	if !p.Timestamp.IsZero() {
		m["timestamp"] = p.Timestamp.Unix()
	}
	return m
}

// parseProperties reads a publish request's properties object.
func parseProperties(m map[string]any) exchange.Properties {
	var p exchange.Properties
	p.ContentType = strField(m, "content_type")
	p.ContentEncoding = strField(m, "content_encoding")
	p.CorrelationID = strField(m, "correlation_id")
	p.ReplyTo = strField(m, "reply_to")
	p.Expiration = strField(m, "expiration")
	p.MessageID = strField(m, "message_id")
	p.Type = strField(m, "type")
	p.UserID = strField(m, "user_id")
	p.AppID = strField(m, "app_id")
	if h, ok := m["headers"].(map[string]any); ok && len(h) > 0 {
		p.Headers = h
	}
	p.DeliveryMode = uint8(intField(m, "delivery_mode", 0))
	p.Priority = uint8(intField(m, "priority", 0))
	if ts := intField(m, "timestamp", 0); ts > 0 {
		p.Timestamp = time.Unix(int64(ts), 0)
	}
	return p
}

func (s *Server) queueBindings(w http.ResponseWriter, r *http.Request, u *auth.User) {
	v, ok := s.readVHost(w, r, u)
	if !ok {
		return
	}
	name := pathValue(r, "name")
	if lookupQueue(v, name) == nil {
		notFound(w)
		return
	}
	out := []bindingJSON{defaultBinding(v.Name(), name)}
	for _, b := range v.Bindings() {
		if b.DestinationType == "queue" && b.Destination == name {
			out = append(out, bindingOf(v.Name(), b))
		}
	}
	sortBindings(out[1:])
	writeJSON(w, http.StatusOK, out)
}
