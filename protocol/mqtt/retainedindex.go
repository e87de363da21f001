package mqtt

import "strings"

// The retained index: one topic trie per vhost, a node per topic level,
// so that a subscription visits the levels its filter can match and not
// every retained topic. A node holds no message body, only a reference
// to the stored record (the record's key is retainedKey(vhost, topic),
// topic being the node's path): the record's size, its QoS and its
// expiry, so that an expired message is passed over without reading it.
// The body is read from the store when it is delivered (retainedStore.match).
//
// A node costs 64 bytes plus its level's text, and its slot in its
// parent: a few children are kept in a slice, more in a map, which is
// rebuilt smaller when most of its entries are gone (Go maps never
// shrink). A node left with no message and no child is removed, up to
// the root, so that clearing a retained topic gives its memory back.

// smallKids is the most children a node keeps in a slice.
const smallKids = 8

// retainedRef is what the index knows of a stored retained message.
type retainedRef struct {
	exp  int64  // unix seconds, 0 never
	size uint32 // bytes of the stored record
	qos  uint8
	set  bool
}

// live reports whether the message has not expired at now (unix seconds).
func (r retainedRef) live(now int64) bool { return r.set && (r.exp == 0 || r.exp > now) }

type rnode struct {
	word string
	kids []*rnode // at most smallKids children, in no order; nil when big is set
	big  *bigKids
	ref  retainedRef
}

type bigKids struct {
	m    map[string]*rnode
	peak int // most entries m held since it was made
}

func (n *rnode) kid(word string) *rnode {
	if n.big != nil {
		return n.big.m[word]
	}
	for _, c := range n.kids {
		if c.word == word {
			return c
		}
	}
	return nil
}

func (n *rnode) numKids() int {
	if n.big != nil {
		return len(n.big.m)
	}
	return len(n.kids)
}

func (n *rnode) eachKid(fn func(c *rnode)) {
	if n.big != nil {
		for _, c := range n.big.m {
			fn(c)
		}
		return
	}
	for _, c := range n.kids {
		fn(c)
	}
}

func (n *rnode) addKid(c *rnode) {
	if n.big != nil {
		n.big.m[c.word] = c
		n.big.peak = max(n.big.peak, len(n.big.m))
		return
	}
	if len(n.kids) < smallKids {
		n.kids = append(n.kids, c)
		return
	}
	m := make(map[string]*rnode, 2*smallKids)
	for _, k := range n.kids {
		m[k.word] = k
	}
	m[c.word] = c
	n.kids, n.big = nil, &bigKids{m: m, peak: len(m)}
}

func (n *rnode) removeKid(c *rnode) {
	if n.big != nil {
		delete(n.big.m, c.word)
		switch l := len(n.big.m); {
		case l <= smallKids/2:
			kids := make([]*rnode, 0, l)
			for _, k := range n.big.m {
				kids = append(kids, k)
			}
			n.kids, n.big = kids, nil
		case l < n.big.peak/4:
			m := make(map[string]*rnode, l)
			for w, k := range n.big.m {
				m[w] = k
			}
			n.big.m, n.big.peak = m, l
		}
		return
	}
	for i, k := range n.kids {
		if k == c {
			last := len(n.kids) - 1
			n.kids[i] = n.kids[last]
			n.kids[last] = nil
			n.kids = n.kids[:last]
			break
		}
	}
	if len(n.kids) == 0 {
		n.kids = nil
	}
}

// retainedIndex is the trie of one vhost. Not safe for concurrent use:
// retainedStore.mu guards it.
type retainedIndex struct {
	root rnode
	n    int // topics with a message
}

// set records ref for topic.
func (x *retainedIndex) set(topic string, ref retainedRef) {
	n := &x.root
	for rest, more := topic, true; more; {
		var w string
		w, rest, more = strings.Cut(rest, "/")
		c := n.kid(w)
		if c == nil {
			c = &rnode{word: strings.Clone(w)}
			n.addKid(c)
		}
		n = c
	}
	if !n.ref.set {
		x.n++
	}
	ref.set = true
	n.ref = ref
}

// del forgets topic's message and removes the nodes left empty.
func (x *retainedIndex) del(topic string) {
	var stack [16]*rnode
	path := append(stack[:0], &x.root)
	n := &x.root
	for rest, more := topic, true; more; {
		var w string
		w, rest, more = strings.Cut(rest, "/")
		if n = n.kid(w); n == nil {
			return
		}
		path = append(path, n)
	}
	if !n.ref.set {
		return
	}
	n.ref = retainedRef{}
	x.n--
	for i := len(path) - 1; i > 0; i-- {
		c := path[i]
		if c.ref.set || c.numKids() > 0 {
			break
		}
		path[i-1].removeKid(c)
	}
}

// get returns topic's reference.
func (x *retainedIndex) get(topic string) (retainedRef, bool) {
	n := &x.root
	for rest, more := topic, true; more; {
		var w string
		w, rest, more = strings.Cut(rest, "/")
		if n = n.kid(w); n == nil {
			return retainedRef{}, false
		}
	}
	return n.ref, n.ref.set
}

// match calls fn for each topic with a message that filter (a valid
// topic filter) matches, with the topic as bytes fn must copy to keep.
// A leading "+" or "#" matches no topic that begins with "$"
// [MQTT-4.7.2-1].
func (x *retainedIndex) match(filter string, fn func(topic []byte, ref retainedRef)) {
	var buf [256]byte
	x.matchAt(&x.root, filter, buf[:0], true, fn)
}

// matchAt matches filter's levels against the children of n, whose topic
// (with a trailing "/", or empty at the root) is prefix.
func (x *retainedIndex) matchAt(n *rnode, filter string, prefix []byte, top bool, fn func([]byte, retainedRef)) {
	l, rest, more := strings.Cut(filter, "/")
	if l == "#" {
		if !top && n.ref.set {
			fn(prefix[:len(prefix)-1], n.ref) // "a/#" matches "a"
		}
		n.eachKid(func(c *rnode) {
			if !top || !dollar(c.word) {
				x.all(c, prefix, fn)
			}
		})
		return
	}
	visit := func(c *rnode) {
		p := append(prefix, c.word...)
		if !more {
			if c.ref.set {
				fn(p, c.ref)
			}
			return
		}
		x.matchAt(c, rest, append(p, '/'), false, fn)
	}
	if l == "+" {
		n.eachKid(func(c *rnode) {
			if !top || !dollar(c.word) {
				visit(c)
			}
		})
		return
	}
	if c := n.kid(l); c != nil {
		visit(c)
	}
}

// each calls fn for every topic with a message.
func (x *retainedIndex) each(fn func(topic []byte, ref retainedRef)) {
	var buf [256]byte
	x.root.eachKid(func(c *rnode) { x.all(c, buf[:0], fn) })
}

// all calls fn for n and every node below it that has a message.
func (x *retainedIndex) all(n *rnode, prefix []byte, fn func([]byte, retainedRef)) {
	p := append(prefix, n.word...)
	if n.ref.set {
		fn(p, n.ref)
	}
	p = append(p, '/')
	n.eachKid(func(c *rnode) { x.all(c, p, fn) })
}

func dollar(word string) bool { return word != "" && word[0] == '$' }
