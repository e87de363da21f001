package conf

import (
	"encoding"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkKeys walks a YAML document against Config's shape before it is
// decoded, so that a mistake is reported by its key path, as the operator
// wrote it, instead of by Go type: an unknown key gives
//
//	amqp.lisen_tls: unknown key (did you mean amqp.tls_listen?)
//
// with the closest known key when one is close (edit distance, also with
// the words of a snake_case key in another order), and a value of the
// wrong type gives the path, the expected type and the line:
//
//	amqp.frame_max: expected an integer, got "big" (line 3)
//
// It returns every problem found, one per line, in document order.
func checkKeys(doc *yaml.Node) error {
	var errs []string
	c := keyChecker{errs: &errs, all: knownKeys(reflect.TypeOf(Config{}), "")}
	if doc.Kind == yaml.DocumentNode {
		for _, n := range doc.Content {
			c.check(n, reflect.TypeOf(Config{}), "")
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(errs, "\n"))
}

type keyChecker struct {
	errs *[]string
	all  []string // every key path of Config, for suggestions across sections
}

var (
	durationType    = reflect.TypeOf(time.Duration(0))
	unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
	textType        = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

func (c keyChecker) fail(n *yaml.Node, format string, args ...any) {
	*c.errs = append(*c.errs, fmt.Sprintf(format, args...)+fmt.Sprintf(" (line %d)", n.Line))
}

// check checks node n, the value at path, against type t.
func (c keyChecker) check(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // key: with no value leaves the default
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textType) || t == durationType {
		c.decode(n, t, path)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			c.fail(n, "%s: expected a mapping of settings, got %s", name(path), describe(n))
			return
		}
		fields := structKeys(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" && k.Tag == "!!merge" { // its mappings' keys are this one's
				if v.Kind == yaml.SequenceNode {
					for _, m := range v.Content {
						c.check(m, t, path)
					}
				} else {
					c.check(v, t, path)
				}
				continue
			}
			if k.Kind == yaml.ScalarNode && k.Tag == "!!null" {
				continue // a null key: the decoder ignores it
			}
			p := join(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				c.unknown(k, p, t, path)
				continue
			}
			c.check(v, ft, p)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			c.fail(n, "%s: expected a mapping (key: value), got %s", name(path), describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			c.check(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			c.fail(n, "%s: expected a list, got %s", name(path), describe(n))
			return
		}
		for i, e := range n.Content {
			c.check(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Interface:
	default:
		c.decode(n, t, path)
	}
}

// decode checks a leaf by decoding it into a fresh value of its type.
func (c keyChecker) decode(n *yaml.Node, t reflect.Type, path string) {
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		c.fail(n, "%s: expected %s, got %s", name(path), typeName(t), describe(n))
	}
}

// unknown reports key k (at path p) that struct t at parent lacks.
func (c keyChecker) unknown(k *yaml.Node, p string, t reflect.Type, parent string) {
	var siblings []string
	for key := range structKeys(t) {
		siblings = append(siblings, key)
	}
	sort.Strings(siblings)
	if s := closest(k.Value, siblings); s != "" {
		c.fail(k, "%s: unknown key (did you mean %s?)", p, join(parent, s))
		return
	}
	// The key may belong in another section (tls_listen at the top).
	// Keys of that very name first, else near ones.
	var exact, near []string
	for _, a := range c.all {
		last := a[strings.LastIndex(a, ".")+1:]
		if last == k.Value {
			exact = append(exact, a)
		} else if closest(k.Value, []string{last}) != "" {
			near = append(near, a)
		}
	}
	elsewhere := exact
	if len(elsewhere) == 0 {
		elsewhere = near
	}
	if n := len(elsewhere); n > 0 && n <= 6 {
		c.fail(k, "%s: unknown key (did you mean %s?)", p, orList(elsewhere))
		return
	}
	c.fail(k, "%s: unknown key", p)
}

func orList(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func name(path string) string {
	if path == "" {
		return "the configuration"
	}
	return path
}

// structKeys maps the YAML keys of struct t to their types, as yaml.v3
// names them: the tag's name, else the lowercased field name; inline
// structs' keys are the parent's.
func structKeys(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		key, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range structKeys(ft) {
					out[k] = v
				}
			}
			continue
		}
		if key == "" {
			key = strings.ToLower(f.Name)
		}
		out[key] = f.Type
	}
	return out
}

// knownKeys lists every key path under struct t (sections and leaves).
func knownKeys(t reflect.Type, path string) []string {
	var out []string
	for k, ft := range structKeys(t) {
		p := join(path, k)
		out = append(out, p)
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != durationType && !reflect.PointerTo(ft).Implements(unmarshalerType) {
			out = append(out, knownKeys(ft, p)...)
		}
	}
	sort.Strings(out)
	return out
}

// typeName says what a value of t is written as.
func typeName(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 30s or 1m30s"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a " + t.String()
}

// describe says what the document holds at n, for errors.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("%q", v)
	}
	return "something else"
}

// closest returns the candidate nearest to key, "" when none is near
// enough: within an edit distance of 2 and of a third of key's length,
// comparing the keys as written and with their snake_case words sorted
// (lisen_tls is near tls_listen).
func closest(key string, candidates []string) string {
	best, bestD := "", 1<<30
	limit := min(2, max(1, len(key)/3))
	for _, c := range candidates {
		d := min(editDistance(key, c), editDistance(sortedWords(key), sortedWords(c)))
		if d <= limit && d < bestD && d < len(c) {
			best, bestD = c, d
		}
	}
	return best
}

func sortedWords(s string) string {
	w := strings.Split(s, "_")
	sort.Strings(w)
	return strings.Join(w, "_")
}

// editDistance is the Damerau–Levenshtein distance (optimal string
// alignment) between a and b, by bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 { // keys are short; bound the work
		if a == b {
			return 0
		}
		return 1 << 20
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
