package mqtt

import (
	"math"
	"strings"
)

// The retained index: one topic trie per vhost, a node per topic level,
// so that a subscription visits the levels its filter can match and not
// every retained topic. A node holds no message body, only a reference
// to the stored record (the record's key is retainedKey(vhost, topic),
// topic being the node's path): the record's size, its QoS and its
// expiry, so that an expired message is passed over without reading it.
// The body is read from the store when it is delivered (retainedStore.match).
//
// A node is 32 bytes and its text. A chain of levels that ends in one
// message and branches nowhere ("devices/42/status" beside other
// devices) is one node whose text holds the rest of the topic, split
// into nodes only when another topic branches off it, and merged back
// when the branch is cleared. A few children are kept in a slice, more
// in a map, which is rebuilt smaller when most of its entries are gone
// (Go maps never shrink). A node left with no message and no child is
// removed, up to the root, so that clearing a retained topic gives its
// memory back.

// smallKids is the most children a node keeps in a slice.
const smallKids = 8

// retainedRef is what the index knows of a stored retained message.
type retainedRef struct {
	exp  uint32 // unix seconds, 0 never
	meta uint32 // refSet | QoS << refQoSShift | size of the stored record (saturated)
}

const (
	refSet      = 1 << 31
	refQoSShift = 29
	refSizeMax  = 1<<refQoSShift - 1
)

func makeRef(size int, qos byte, exp int64) retainedRef {
	return retainedRef{exp: uint32(max(0, min(exp, math.MaxUint32))),
		meta: refSet | uint32(qos&3)<<refQoSShift | uint32(min(size, refSizeMax))}
}

func (r retainedRef) set() bool    { return r.meta&refSet != 0 }
func (r retainedRef) qos() byte    { return byte(r.meta>>refQoSShift) & 3 }
func (r retainedRef) size() uint32 { return r.meta & refSizeMax }

// live reports whether the message has not expired at now (unix seconds).
func (r retainedRef) live(now int64) bool { return r.set() && (r.exp == 0 || int64(r.exp) > now) }

// rnode is a topic level (text holds no "/"), or a level and the rest of
// the topic of its message below it (text "level/rest": a tail node,
// with no children).
type rnode struct {
	text string
	ref  retainedRef
	kids *rkids
}

type rkids struct {
	list []*rnode // at most smallKids children, in no order; nil when m is set
	m    map[string]*rnode
	peak int // most entries m held since it was made
}

// word is n's level.
func (n *rnode) word() string {
	if i := strings.IndexByte(n.text, '/'); i >= 0 {
		return n.text[:i]
	}
	return n.text
}

// tail is the rest of a tail node's topic below its level.
func (n *rnode) tail() (string, bool) {
	i := strings.IndexByte(n.text, '/')
	if i < 0 {
		return "", false
	}
	return n.text[i+1:], true
}

func (n *rnode) kid(word string) *rnode {
	k := n.kids
	if k == nil {
		return nil
	}
	if k.m != nil {
		return k.m[word]
	}
	for _, c := range k.list {
		if c.word() == word {
			return c
		}
	}
	return nil
}

func (n *rnode) numKids() int {
	switch k := n.kids; {
	case k == nil:
		return 0
	case k.m != nil:
		return len(k.m)
	default:
		return len(k.list)
	}
}

func (n *rnode) eachKid(fn func(c *rnode)) {
	k := n.kids
	if k == nil {
		return
	}
	if k.m != nil {
		for _, c := range k.m {
			fn(c)
		}
		return
	}
	for _, c := range k.list {
		fn(c)
	}
}

func (n *rnode) addKid(c *rnode) {
	k := n.kids
	switch {
	case k == nil:
		n.kids = &rkids{list: []*rnode{c}}
	case k.m != nil:
		k.m[c.word()] = c
		k.peak = max(k.peak, len(k.m))
	case len(k.list) < smallKids:
		k.list = append(k.list, c)
	default:
		m := make(map[string]*rnode, 2*smallKids)
		for _, o := range k.list {
			m[o.word()] = o
		}
		m[c.word()] = c
		k.list, k.m, k.peak = nil, m, len(m)
	}
}

func (n *rnode) removeKid(c *rnode) {
	k := n.kids
	if k.m != nil {
		delete(k.m, c.word())
		switch l := len(k.m); {
		case l == 0:
			n.kids = nil
		case l <= smallKids/2:
			list := make([]*rnode, 0, l)
			for _, o := range k.m {
				list = append(list, o)
			}
			k.list, k.m, k.peak = list, nil, 0
		case l < k.peak/4:
			m := make(map[string]*rnode, l)
			for w, o := range k.m {
				m[w] = o
			}
			k.m, k.peak = m, l
		}
		return
	}
	for i, o := range k.list {
		if o == c {
			last := len(k.list) - 1
			k.list[i] = k.list[last]
			k.list[last] = nil
			k.list = k.list[:last]
			break
		}
	}
	if len(k.list) == 0 {
		n.kids = nil
	}
}

// retainedIndex is the trie of one vhost. Not safe for concurrent use:
// retainedStore.mu guards it.
type retainedIndex struct {
	root rnode
	n    int // topics with a message
}

// set records ref (set) for topic.
func (x *retainedIndex) set(topic string, ref retainedRef) {
	n := &x.root
	for rest := topic; ; {
		w, below, more := strings.Cut(rest, "/")
		c := n.kid(w)
		if c == nil {
			n.addKid(&rnode{text: strings.Clone(rest), ref: ref})
			x.n++
			return
		}
		if t, ok := c.tail(); ok {
			if more && t == below {
				c.ref = ref
				return
			}
			// Another topic branches off c's chain: c becomes its
			// level alone, the rest a child of it.
			c.addKid(&rnode{text: t, ref: c.ref})
			c.text, c.ref = c.text[:len(w)], retainedRef{}
		}
		if !more {
			if !c.ref.set() {
				x.n++
			}
			c.ref = ref
			return
		}
		n, rest = c, below
	}
}

// find returns the node of topic's message and the nodes above it, the
// root first; nil if topic has none.
func (x *retainedIndex) find(topic string, path []*rnode) (*rnode, []*rnode) {
	n := &x.root
	path = append(path, n)
	for rest := topic; ; {
		w, below, more := strings.Cut(rest, "/")
		c := n.kid(w)
		if c == nil {
			return nil, path
		}
		if t, ok := c.tail(); ok {
			if more && t == below {
				return c, path
			}
			return nil, path
		}
		if !more {
			if c.ref.set() {
				return c, path
			}
			return nil, path
		}
		path = append(path, c)
		n, rest = c, below
	}
}

// get returns topic's reference.
func (x *retainedIndex) get(topic string) (retainedRef, bool) {
	var stack [16]*rnode
	if n, _ := x.find(topic, stack[:0]); n != nil {
		return n.ref, true
	}
	return retainedRef{}, false
}

// del forgets topic's message, removes the nodes left empty and merges
// a chain left with one message into one node.
func (x *retainedIndex) del(topic string) {
	var stack [16]*rnode
	n, path := x.find(topic, stack[:0])
	if n == nil {
		return
	}
	n.ref = retainedRef{}
	x.n--
	path = append(path, n)
	i := len(path) - 1
	for ; i > 0 && path[i].numKids() == 0 && !path[i].ref.set(); i-- {
		path[i-1].removeKid(path[i])
	}
	// path[i] is the deepest node left: if its only content is one
	// child with a message and nothing below, they become one node.
	if p := path[i]; i > 0 && !p.ref.set() && p.numKids() == 1 {
		var c *rnode
		p.eachKid(func(k *rnode) { c = k })
		if c.numKids() == 0 {
			p.text, p.ref, p.kids = p.text+"/"+c.text, c.ref, nil
		}
	}
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
		if !top && n.ref.set() {
			fn(prefix[:len(prefix)-1], n.ref) // "a/#" matches "a"
		}
		n.eachKid(func(c *rnode) {
			if !top || !dollar(c.text) {
				x.all(c, prefix, fn)
			}
		})
		return
	}
	visit := func(c *rnode) {
		p := append(prefix, c.text...)
		if _, ok := c.tail(); ok {
			if matchLevels(filter, c.text) {
				fn(p, c.ref)
			}
			return
		}
		if !more {
			if c.ref.set() {
				fn(p, c.ref)
			}
			return
		}
		x.matchAt(c, rest, append(p, '/'), false, fn)
	}
	if l == "+" {
		n.eachKid(func(c *rnode) {
			if !top || !dollar(c.text) {
				visit(c)
			}
		})
		return
	}
	if c := n.kid(l); c != nil {
		visit(c)
	}
}

// matchLevels is wire.Match below the first level: no "$" rule.
func matchLevels(filter, topic string) bool {
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		if !fmore || !tmore {
			return fmore == tmore || (!tmore && frest == "#")
		}
		filter, topic = frest, trest
	}
}

// each calls fn for every topic with a message.
func (x *retainedIndex) each(fn func(topic []byte, ref retainedRef)) {
	var buf [256]byte
	x.root.eachKid(func(c *rnode) { x.all(c, buf[:0], fn) })
}

// all calls fn for n and every node below it that has a message.
func (x *retainedIndex) all(n *rnode, prefix []byte, fn func([]byte, retainedRef)) {
	p := append(prefix, n.text...)
	if n.ref.set() {
		fn(p, n.ref)
	}
	p = append(p, '/')
	n.eachKid(func(c *rnode) { x.all(c, p, fn) })
}

func dollar(word string) bool { return word != "" && word[0] == '$' }
