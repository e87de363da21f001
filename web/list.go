package web

import (
	"cmp"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Paging as RabbitMQ's management API does it: with ?page=N the answer is
// {items, page, page_size, page_count, filtered_count, item_count,
// total_count}; without, a plain array. name filters (a substring, or a
// regular expression with use_regex=true), sort names a field (dotted for
// nested ones, e.g. message_stats.publish_details.rate), sort_reverse
// reverses.

const (
	defaultPageSize = 100
	maxPageSize     = 500
)

type listQuery struct {
	paged       bool
	page, size  int
	name        string
	re          *regexp.Regexp
	sort        string
	reverse     bool
	filterNames bool
}

type pageJSON[T any] struct {
	Items         []T `json:"items"`
	Page          int `json:"page"`
	PageSize      int `json:"page_size"`
	PageCount     int `json:"page_count"`
	FilteredCount int `json:"filtered_count"`
	ItemCount     int `json:"item_count"`
	TotalCount    int `json:"total_count"`
}

func parseListQuery(r *http.Request) (listQuery, error) {
	q := r.URL.Query()
	lq := listQuery{sort: q.Get("sort"), reverse: q.Get("sort_reverse") == "true", name: q.Get("name")}
	if p := q.Get("page"); p != "" {
		lq.paged = true
		lq.page, _ = strconv.Atoi(p)
		lq.size = defaultPageSize
		sizeText := "undefined"
		if ps := q.Get("page_size"); ps != "" {
			sizeText = ps
			lq.size, _ = strconv.Atoi(ps)
		}
		if lq.page < 1 || lq.size < 1 || lq.size > maxPageSize {
			return lq, fmt.Errorf("Invalid pagination parameters: page number %s, page size %s", p, sizeText)
		}
	}
	if lq.name != "" {
		lq.filterNames = true
		if q.Get("use_regex") == "true" {
			re, err := regexp.Compile(lq.name)
			if err != nil {
				return lq, fmt.Errorf("Invalid regex %s: %v", lq.name, err)
			}
			lq.re = re
		}
	}
	return lq, nil
}

func (lq *listQuery) match(name string) bool {
	if !lq.filterNames {
		return true
	}
	if lq.re != nil {
		return lq.re.MatchString(name)
	}
	return strings.Contains(strings.ToLower(name), strings.ToLower(lq.name))
}

// listSpec describes a list of refs (cheap handles, e.g. *exchange.Queue)
// and how to render each as an item.
type listSpec[R, T any] struct {
	refs []R
	// vhost and name of a ref, for the name filter and the default sort.
	vhost func(R) string
	name  func(R) string
	build func(R) T
	// key, if set, returns the sort key of a ref for some fields without
	// building the item (ok false: field not covered).
	key func(r R, field string) (any, bool)
}

// respondList filters, sorts and pages refs and writes the answer. Only
// when sorting by a field other than name or vhost are all filtered items
// built; otherwise just the page is, so that 100,000 queues stay cheap.
func respondList[R, T any](w http.ResponseWriter, r *http.Request, spec listSpec[R, T]) {
	lq, err := parseListQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_pagination_parameters", err.Error())
		return
	}
	total := len(spec.refs)
	refs := spec.refs
	if lq.filterNames {
		refs = make([]R, 0, len(spec.refs))
		for _, ref := range spec.refs {
			if lq.match(spec.name(ref)) {
				refs = append(refs, ref)
			}
		}
	}
	filtered := len(refs)
	vh := spec.vhost
	if vh == nil {
		vh = func(R) string { return "" }
	}
	var items []T
	switch lq.sort {
	case "", "name", "vhost":
		byVHost := lq.sort == "vhost" || lq.sort == ""
		slices.SortFunc(refs, func(a, b R) int {
			if byVHost {
				if c := strings.Compare(vh(a), vh(b)); c != 0 {
					return c
				}
			}
			c := strings.Compare(spec.name(a), spec.name(b))
			if c == 0 && !byVHost {
				c = strings.Compare(vh(a), vh(b))
			}
			return c
		})
		if lq.reverse {
			slices.Reverse(refs)
		}
		refs = pageOf(refs, lq)
		items = make([]T, len(refs))
		for i, ref := range refs {
			items[i] = spec.build(ref)
		}
	default:
		if spec.key != nil && len(refs) > 0 {
			if _, ok := spec.key(refs[0], lq.sort); ok {
				keys := make([]any, len(refs))
				for i, ref := range refs {
					keys[i], _ = spec.key(ref, lq.sort)
				}
				idx := make([]int, len(refs))
				for i := range idx {
					idx[i] = i
				}
				slices.SortStableFunc(idx, func(a, b int) int {
					if lq.reverse {
						return compareValues(keys[b], keys[a])
					}
					return compareValues(keys[a], keys[b])
				})
				idx = pageOf(idx, lq)
				items = make([]T, len(idx))
				for i, j := range idx {
					items[i] = spec.build(refs[j])
				}
				break
			}
		}
		items = make([]T, len(refs))
		for i, ref := range refs {
			items[i] = spec.build(ref)
		}
		sortByField(items, lq.sort, lq.reverse)
		items = pageOf(items, lq)
	}
	if !lq.paged {
		writeJSON(w, http.StatusOK, items)
		return
	}
	writeJSON(w, http.StatusOK, pageJSON[T]{Items: items, Page: lq.page, PageSize: lq.size,
		PageCount: max(1, (filtered+lq.size-1)/lq.size), FilteredCount: filtered, ItemCount: len(items), TotalCount: total})
}

func pageOf[T any](s []T, lq listQuery) []T {
	if !lq.paged {
		return s
	}
	start := (lq.page - 1) * lq.size
	if start >= len(s) {
		return s[:0]
	}
	return s[start:min(len(s), start+lq.size)]
}

// sortByField sorts items by the value at a dotted JSON path. Missing
// values sort first; numbers numerically, strings lexically.
func sortByField[T any](items []T, path string, reverse bool) {
	parts := strings.Split(path, ".")
	keys := make([]any, len(items))
	for i := range items {
		keys[i] = fieldAt(reflect.ValueOf(items[i]), parts)
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		c := compareValues(keys[a], keys[b])
		if reverse {
			return -c
		}
		return c
	})
	sorted := make([]T, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
}

// fieldAt follows path through structs (by json tag), maps and pointers.
func fieldAt(v reflect.Value, path []string) any {
	for _, p := range path {
		for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
			if v.IsNil() {
				return nil
			}
			v = v.Elem()
		}
		switch v.Kind() {
		case reflect.Struct:
			f, ok := structField(v, p)
			if !ok {
				return nil
			}
			v = f
		case reflect.Map:
			e := v.MapIndex(reflect.ValueOf(p))
			if !e.IsValid() {
				return nil
			}
			v = e
		default:
			return nil
		}
	}
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if !v.IsValid() || !v.CanInterface() {
		return nil
	}
	return v.Interface()
}

// fieldIndex caches the field index of a json name per struct type.
var fieldIndex sync.Map // fieldKey -> []int (nil: none)

type fieldKey struct {
	t    reflect.Type
	name string
}

func structField(v reflect.Value, name string) (reflect.Value, bool) {
	k := fieldKey{v.Type(), name}
	idx, ok := fieldIndex.Load(k)
	if !ok {
		idx = findField(v.Type(), name)
		fieldIndex.Store(k, idx)
	}
	path := idx.([]int)
	if path == nil {
		return reflect.Value{}, false
	}
	return v.FieldByIndex(path), true
}

func findField(t reflect.Type, name string) []int {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			if sub := findField(f.Type, name); sub != nil {
				return append([]int{i}, sub...)
			}
			continue
		}
		if tag == name {
			return []int{i}
		}
	}
	return nil
}

func compareValues(a, b any) int {
	if a == nil || b == nil {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return -1
		}
		return 1
	}
	af, aok := toFloat(a)
	bf, bok := toFloat(b)
	if aok && bok {
		return cmp.Compare(af, bf)
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func toFloat(v any) (float64, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(rv.Uint()), true
	case reflect.Float32, reflect.Float64:
		return rv.Float(), true
	case reflect.Bool:
		if rv.Bool() {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}
