package exchange

import (
	"cmp"
	"slices"
	"strings"
	"sync/atomic"
)

// binding is one edge of the routing graph: from a source exchange to a
// queue or to another exchange.
type binding struct {
	src  *Exchange
	q    *Queue    // destination queue, or nil
	x    *Exchange // destination exchange, or nil
	key  string
	args Table

	// Positions in the lists it is in (bindindex.go): its source's
	// bindings, its destination's, its source router's. int32s, beside
	// the flags below: a binding of 80 bytes, not 96 (two a device).
	srcPos, dstPos, rPos int32

	// headers exchange: parsed match rules.
	matchAll  bool
	matchXArg bool // "any-with-x"/"all-with-x": x- headers take part

	id uint64 // set by a topic router, for dedupeBindings
	// sameNext is the next binding with the same source, destination
	// and key (other arguments) in the source's index (bindindex.go).
	sameNext *binding
}

func (b *binding) destName() string {
	if b.q != nil {
		return b.q.name
	}
	return b.x.name
}

// router holds one exchange's bindings in the shape its type routes by.
type router interface {
	add(b *binding)
	remove(b *binding)
	// route appends the bindings that match to out.
	route(key string, headers Table, out []*binding) []*binding
}

func newRouter(kind string) router {
	switch kind {
	case KindDirect:
		return &directRouter{m: map[string][]*binding{}}
	case KindFanout:
		return &fanoutRouter{}
	case KindTopic:
		return newTopicRouter()
	case KindHeaders:
		return &headersRouter{}
	}
	return nil
}

// direct: exact routing key match.
type directRouter struct {
	m    map[string][]*binding
	peak int // the most keys m held since it was last copied (shrink.go)
}

func (r *directRouter) add(b *binding) {
	l := r.m[b.key]
	listAdd(&l, b, rPos)
	r.m[b.key] = l
}
func (r *directRouter) remove(b *binding) {
	l := r.m[b.key]
	listRemove(&l, b, rPos)
	if len(l) == 0 {
		delete(r.m, b.key)
		r.m = shrinkMap(r.m, &r.peak)
	} else {
		r.m[b.key] = l
	}
}
func (r *directRouter) route(key string, _ Table, out []*binding) []*binding {
	return append(out, r.m[key]...)
}

// fanout: every binding.
type fanoutRouter struct{ all []*binding }

func (r *fanoutRouter) add(b *binding)    { listAdd(&r.all, b, rPos) }
func (r *fanoutRouter) remove(b *binding) { listRemove(&r.all, b, rPos) }
func (r *fanoutRouter) route(_ string, _ Table, out []*binding) []*binding {
	return append(out, r.all...)
}

// topic: a trie of dot-separated words; '*' matches one word, '#' zero or more.
// The wildcards' children are fields of their own, not map entries: a
// routing walk asks for them at every level it reaches.
type topicNode struct {
	children map[string]*topicNode // literal words
	star     *topicNode            // "*"
	hash     *topicNode            // "#"
	bindings []*binding
}

// child is n's child for word w (a literal, "*" or "#"), nil if none.
func (n *topicNode) child(w string) *topicNode {
	switch w {
	case "*":
		return n.star
	case "#":
		return n.hash
	}
	return n.children[w]
}

// addChild returns n's child for w, made if there is none.
func (n *topicNode) addChild(w string) *topicNode {
	if c := n.child(w); c != nil {
		return c
	}
	c := &topicNode{}
	switch w {
	case "*":
		n.star = c
	case "#":
		n.hash = c
	default:
		if n.children == nil {
			n.children = map[string]*topicNode{}
		}
		n.children[w] = c
	}
	return c
}

// dropChild removes n's child for w.
func (n *topicNode) dropChild(w string) {
	switch w {
	case "*":
		n.star = nil
	case "#":
		n.hash = nil
	default:
		delete(n.children, w)
	}
}

// empty: no bindings and no children.
func (n *topicNode) empty() bool {
	return len(n.bindings) == 0 && len(n.children) == 0 && n.star == nil && n.hash == nil
}

type topicRouter struct {
	root *topicNode
	// peaks holds, for the nodes whose children map reached shrinkFloor,
	// the most children each held since the map was last copied
	// (shrink.go); small nodes pay nothing for it.
	peaks map[*topicNode]int
}

func newTopicRouter() *topicRouter { return &topicRouter{root: &topicNode{}} }

func (r *topicRouter) add(b *binding) {
	n := r.root
	for _, w := range splitWords(b.key) {
		p := n
		n = n.addChild(w)
		if l := len(p.children); l >= shrinkFloor && l > r.peaks[p] {
			if r.peaks == nil {
				r.peaks = map[*topicNode]int{}
			}
			r.peaks[p] = l
		}
	}
	if b.id == 0 {
		b.id = bindingIDs.Add(1)
	}
	listAdd(&n.bindings, b, rPos)
}

// bindingIDs numbers the bindings topic routers hold.
var bindingIDs atomic.Uint64

func (r *topicRouter) remove(b *binding) {
	words := splitWords(b.key)
	path := make([]*topicNode, 0, len(words)+1)
	n := r.root
	path = append(path, n)
	for _, w := range words {
		n = n.child(w)
		if n == nil {
			return
		}
		path = append(path, n)
	}
	listRemove(&n.bindings, b, rPos)
	// Prune empty nodes bottom-up.
	for i := len(words) - 1; i >= 0; i-- {
		if !path[i+1].empty() {
			break
		}
		p := path[i]
		p.dropChild(words[i])
		delete(r.peaks, path[i+1])
		if peak, ok := r.peaks[p]; ok {
			p.children = shrinkMap(p.children, &peak)
			if peak < shrinkFloor {
				delete(r.peaks, p)
			} else {
				r.peaks[p] = peak
			}
		}
	}
}

// splitWords splits a routing key or pattern on '.'. The empty key is zero
// words, as in RabbitMQ (rabbit_db_topic_exchange:split_topic_key).
func splitWords(key string) []string {
	if key == "" {
		return nil
	}
	return strings.Split(key, ".")
}

func (r *topicRouter) route(key string, _ Table, out []*binding) []*binding {
	start := len(out)
	out = topicMatch(r.root, key, key == "", out)
	return dedupeBindings(out, start)
}

// topicMatch walks the trie against the remaining routing key. done is true
// when every word of the key has been consumed.
func topicMatch(n *topicNode, rest string, done bool, out []*binding) []*binding {
	if done {
		out = append(out, n.bindings...)
		// A trailing '#' matches zero words.
		if h := n.hash; h != nil {
			out = topicMatch(h, "", true, out)
		}
		return out
	}
	word, tail, more := strings.Cut(rest, ".")
	if n.children != nil {
		if c := n.children[word]; c != nil {
			out = topicMatch(c, tail, !more, out)
		}
	}
	if c := n.star; c != nil {
		out = topicMatch(c, tail, !more, out)
	}
	if c := n.hash; c != nil {
		// '#' swallows zero words: try c against this word onwards...
		out = topicMatch(c, rest, false, out)
		// ...or one or more words.
		r, d := rest, false
		for !d {
			_, t, m := strings.Cut(r, ".")
			r, d = t, !m
			out = topicMatch(c, r, d, out)
		}
	}
	return out
}

func dedupeBindings(out []*binding, start int) []*binding {
	n := len(out) - start
	if n < 2 {
		return out
	}
	if n > 16 {
		// Many matches (a fan-out): by id, in n log n rather than n².
		s := out[start:]
		slices.SortFunc(s, func(a, b *binding) int { return cmp.Compare(a.id, b.id) })
		s = slices.CompactFunc(s, func(a, b *binding) bool { return a == b })
		clear(out[start+len(s):])
		return out[:start+len(s)]
	}
	j := start
	for i := start; i < len(out); i++ {
		dup := false
		for k := start; k < j; k++ {
			if out[k] == out[i] {
				dup = true
				break
			}
		}
		if !dup {
			out[j] = out[i]
			j++
		}
	}
	return out[:j]
}

// headers: match binding arguments against message headers.
type headersRouter struct{ all []*binding }

func (r *headersRouter) add(b *binding) {
	b.matchAll = true
	switch xm, _ := b.args["x-match"].(string); xm {
	case "any":
		b.matchAll = false
	case "any-with-x":
		b.matchAll, b.matchXArg = false, true
	case "all-with-x":
		b.matchXArg = true
	}
	listAdd(&r.all, b, rPos)
}
func (r *headersRouter) remove(b *binding) { listRemove(&r.all, b, rPos) }
func (r *headersRouter) route(_ string, h Table, out []*binding) []*binding {
	for _, b := range r.all {
		if headersMatch(b, h) {
			out = append(out, b)
		}
	}
	return out
}

func headersMatch(b *binding, h Table) bool {
	considered := 0
	for k, want := range b.args {
		if strings.HasPrefix(k, "x-") && !b.matchXArg {
			continue
		}
		if k == "x-match" {
			continue
		}
		considered++
		got, ok := h[k]
		// A void (nil) binding value matches on presence alone.
		hit := ok && (want == nil || valuesEqual(got, want))
		if b.matchAll && !hit {
			return false
		}
		if !b.matchAll && hit {
			return true
		}
	}
	_ = considered
	return b.matchAll
}
