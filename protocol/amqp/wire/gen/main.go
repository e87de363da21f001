// Command gen writes methods_gen.go for package wire from the AMQP 0-9-1
// specification XML (the RabbitMQ "stripped extended" edition shipped in
// the github.com/rabbitmq/amqp091-go module).
//
// It is run by `go generate` in protocol/amqp/wire:
//
//	go run ./gen [-spec path/to/amqp0-9-1.stripped.extended.xml] [-out methods_gen.go]
//
// Without -spec it locates the module directory with
// `go list -m -f '{{.Dir}}' github.com/rabbitmq/amqp091-go`.
package main

import (
	"bytes"
	"encoding/xml"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const specModule = "github.com/rabbitmq/amqp091-go"
const specFile = "spec/amqp0-9-1.stripped.extended.xml"

type spec struct {
	Constants []constant `xml:"constant"`
	Domains   []domain   `xml:"domain"`
	Classes   []class    `xml:"class"`
}

type constant struct {
	Name  string `xml:"name,attr"`
	Value int    `xml:"value,attr"`
	Class string `xml:"class,attr"`
}

type domain struct {
	Name string `xml:"name,attr"`
	Type string `xml:"type,attr"`
}

type class struct {
	Name    string   `xml:"name,attr"`
	Index   int      `xml:"index,attr"`
	Methods []method `xml:"method"`
}

type method struct {
	Name        string  `xml:"name,attr"`
	Index       int     `xml:"index,attr"`
	Synchronous int     `xml:"synchronous,attr"`
	Content     int     `xml:"content,attr"`
	Deprecated  int     `xml:"deprecated,attr"`
	Fields      []field `xml:"field"`
}

type field struct {
	Name     string `xml:"name,attr"`
	Domain   string `xml:"domain,attr"`
	Type     string `xml:"type,attr"`
	Reserved int    `xml:"reserved,attr"`
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("wire/gen: ")
	specPath := flag.String("spec", "", "path to amqp0-9-1.stripped.extended.xml (default: from the amqp091-go module)")
	out := flag.String("out", "methods_gen.go", "output file")
	flag.Parse()

	if *specPath == "" {
		dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", specModule).Output()
		if err != nil {
			log.Fatalf("locating %s: %v", specModule, err)
		}
		*specPath = filepath.Join(strings.TrimSpace(string(dir)), specFile)
	}
	raw, err := os.ReadFile(*specPath)
	if err != nil {
		log.Fatal(err)
	}
	var s spec
	if err := xml.Unmarshal(raw, &s); err != nil {
		log.Fatalf("parsing %s: %v", *specPath, err)
	}
	src, err := generate(&s)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
}

// goTypes maps AMQP primitive types to Go types.
var goTypes = map[string]string{
	"octet":     "uint8",
	"short":     "uint16",
	"long":      "uint32",
	"longlong":  "uint64",
	"bit":       "bool",
	"shortstr":  "string",
	"longstr":   "string",
	"table":     "Table",
	"timestamp": "time.Time",
}

// initialisms are written in upper case in Go identifiers.
var initialisms = map[string]string{"ok": "OK", "id": "ID", "nowait": "NoWait"}

// fieldNames renames fields whose Go name would clash with a Method method.
var fieldNames = map[string]string{"class-id": "ReplyClassID", "method-id": "ReplyMethodID"}

// frameConstants are the spec constants that are not reply codes.
var frameConstants = map[string]bool{
	"frame-method": true, "frame-header": true, "frame-body": true,
	"frame-heartbeat": true, "frame-min-size": true, "frame-end": true,
}

// camel turns "start-ok" into "StartOK".
func camel(s string) string {
	var b strings.Builder
	for _, p := range strings.Split(s, "-") {
		if p == "" {
			continue
		}
		if v, ok := initialisms[p]; ok {
			b.WriteString(v)
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	return b.String()
}

type genField struct {
	goName  string // "" for reserved fields
	amqp    string // primitive type
	bitPos  int    // for bits: position in the packed octet
	lastBit bool   // for bits: last bit of its octet
}

func resolveFields(s *spec, m method) ([]genField, bool, error) {
	domains := map[string]string{}
	for _, d := range s.Domains {
		domains[d.Name] = d.Type
	}
	var out []genField
	usesTime := false
	bit := 0
	for i, f := range m.Fields {
		t := f.Type
		if t == "" {
			t = domains[f.Domain]
		}
		if _, ok := goTypes[t]; !ok {
			return nil, false, fmt.Errorf("method %s field %s: unknown type %q", m.Name, f.Name, t)
		}
		gf := genField{amqp: t}
		if f.Reserved == 0 {
			gf.goName = camel(f.Name)
			if n, ok := fieldNames[f.Name]; ok {
				gf.goName = n
			}
		}
		if t == "timestamp" && f.Reserved == 0 {
			usesTime = true
		}
		if t == "bit" {
			if bit == 8 {
				bit = 0
			}
			gf.bitPos = bit
			bit++
			next := i + 1
			gf.lastBit = bit == 8 || next == len(m.Fields) || fieldType(domains, m.Fields[next]) != "bit"
		} else {
			bit = 0
		}
		out = append(out, gf)
	}
	return out, usesTime, nil
}

func fieldType(domains map[string]string, f field) string {
	if f.Type != "" {
		return f.Type
	}
	return domains[f.Domain]
}

func generate(s *spec) ([]byte, error) {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	type gm struct {
		class  class
		method method
		fields []genField
		typ    string
	}
	var methods []gm
	usesTime := false
	for _, c := range s.Classes {
		for _, m := range c.Methods {
			fs, ut, err := resolveFields(s, m)
			if err != nil {
				return nil, err
			}
			usesTime = usesTime || ut
			methods = append(methods, gm{c, m, fs, camel(c.Name) + camel(m.Name)})
		}
	}

	p("// Code generated by go run ./gen from the AMQP 0-9-1 spec; DO NOT EDIT.\n\n")
	p("package wire\n\n")
	if usesTime {
		p("import \"time\"\n\n")
	}

	// Frame constants and reply codes.
	p("// Frame types and sizes from the specification.\nconst (\n")
	for _, c := range s.Constants {
		if frameConstants[c.Name] {
			if c.Name == "frame-min-size" {
				p("\t%s uint32 = %d\n", camel(c.Name), c.Value)
			} else {
				p("\t%s uint8 = %d\n", camel(c.Name), c.Value)
			}
		}
	}
	p(")\n\n")
	p("// Reply codes from the specification. Soft errors close a channel, hard\n// errors close the connection (see IsHardError).\nconst (\n")
	for _, c := range s.Constants {
		if !frameConstants[c.Name] {
			p("\t%s uint16 = %d // %s\n", camel(c.Name), c.Value, orDefault(c.Class, "success"))
		}
	}
	p(")\n\n")
	p("// ReplyName returns the name RabbitMQ uses for a reply code, such as\n// \"NOT_FOUND\", or \"\" for a code the specification does not define.\n")
	p("func ReplyName(code uint16) string {\n\tswitch code {\n")
	for _, c := range s.Constants {
		if !frameConstants[c.Name] {
			p("\tcase %s:\n\t\treturn %q\n", camel(c.Name), strings.ToUpper(strings.ReplaceAll(c.Name, "-", "_")))
		}
	}
	p("\t}\n\treturn \"\"\n}\n\n")
	p("// IsHardError reports whether the specification classes a reply code as a\n// hard (connection-scope) error.\n")
	p("func IsHardError(code uint16) bool {\n\tswitch code {\n\tcase ")
	var hard []string
	for _, c := range s.Constants {
		if c.Class == "hard-error" {
			hard = append(hard, camel(c.Name))
		}
	}
	p("%s:\n\t\treturn true\n\t}\n\treturn false\n}\n\n", strings.Join(hard, ", "))

	// Class and method ids.
	p("// Class ids.\nconst (\n")
	for _, c := range s.Classes {
		p("\tClass%s uint16 = %d\n", camel(c.Name), c.Index)
	}
	p(")\n\n")
	p("// Method ids, unique within their class.\nconst (\n")
	for _, m := range methods {
		p("\tMethod%s uint16 = %d\n", m.typ, m.method.Index)
	}
	p(")\n\n")

	for _, m := range methods {
		genMethod(&b, m.class, m.method, m.fields, m.typ)
	}

	// Dispatch.
	p("// newMethod returns a zero method value for a class and method id, or nil.\n")
	p("func newMethod(classID, methodID uint16) Method {\n\tswitch classID {\n")
	for _, c := range s.Classes {
		p("\tcase Class%s:\n\t\tswitch methodID {\n", camel(c.Name))
		for _, m := range c.Methods {
			t := camel(c.Name) + camel(m.Name)
			p("\t\tcase Method%s:\n\t\t\treturn new(%s)\n", t, t)
		}
		p("\t\t}\n")
	}
	p("\t}\n\treturn nil\n}\n\n")

	p("// allMethods returns one zero value of every method, in specification order.\n")
	p("func allMethods() []Method {\n\treturn []Method{\n")
	for _, m := range methods {
		p("\t\tnew(%s),\n", m.typ)
	}
	p("\t}\n}\n")

	src, err := format.Source(b.Bytes())
	if err != nil {
		return b.Bytes(), fmt.Errorf("gofmt generated code: %w", err)
	}
	return src, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func genMethod(b *bytes.Buffer, c class, m method, fields []genField, typ string) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	name := c.Name + "." + m.Name
	p("// %s is the AMQP method %s (class %d, method %d).", typ, name, c.Index, m.Index)
	if m.Content == 1 {
		p("\n// It is followed by a content header and body.")
	}
	if m.Deprecated == 1 {
		p("\n// The specification deprecates it.")
	}
	p("\ntype %s struct {", typ)
	sep := ""
	for _, f := range fields {
		if f.goName != "" {
			p("\n\t%s %s", f.goName, goTypes[f.amqp])
			sep = "\n"
		}
	}
	p("%s}\n\n", sep)
	p("func (*%s) ClassID() uint16 { return Class%s }\n", typ, camel(c.Name))
	p("func (*%s) MethodID() uint16 { return Method%s }\n", typ, typ)
	p("func (*%s) Name() string { return %q }\n", typ, name)
	p("func (*%s) HasContent() bool { return %v }\n", typ, m.Content == 1)
	p("func (*%s) Sync() bool { return %v }\n\n", typ, m.Synchronous == 1)

	// Encoder.
	recv := "m"
	if len(fields) == 0 {
		p("func (*%s) AppendArgs(b []byte) ([]byte, error) { return b, nil }\n\n", typ)
	} else {
		hasNamed := false
		for _, f := range fields {
			if f.goName != "" {
				hasNamed = true
			}
		}
		if !hasNamed {
			recv = ""
		}
		p("func (%s *%s) AppendArgs(b []byte) ([]byte, error) {\n\te := encoder{b: b}\n", recv, typ)
		bitsDeclared := false
		for _, f := range fields {
			val := "m." + f.goName
			if f.goName == "" {
				val = zero(f.amqp)
			}
			switch f.amqp {
			case "bit":
				if f.bitPos == 0 {
					if bitsDeclared {
						p("\tbits = 0\n")
					} else {
						p("\tvar bits uint8\n")
						bitsDeclared = true
					}
				}
				if f.goName != "" {
					p("\tif %s {\n\t\tbits |= 1 << %d\n\t}\n", val, f.bitPos)
				}
				if f.lastBit {
					p("\te.octet(bits)\n")
				}
			default:
				p("\te.%s(%s)\n", f.amqp, val)
			}
		}
		p("\treturn e.b, e.err\n}\n\n")
	}

	// Decoder.
	if len(fields) == 0 {
		p("func (*%s) DecodeArgs(b []byte) error { return finish(b) }\n\n", typ)
		return
	}
	drecv := "m"
	hasNamed := false
	for _, f := range fields {
		if f.goName != "" {
			hasNamed = true
		}
	}
	if !hasNamed {
		drecv = ""
	}
	p("func (%s *%s) DecodeArgs(b []byte) error {\n\td := decoder{b: b}\n", drecv, typ)
	bitsDeclared := false
	for _, f := range fields {
		switch {
		case f.amqp == "bit":
			if f.bitPos == 0 {
				if f.goName == "" && f.lastBit {
					p("\td.octet()\n")
					continue
				}
				if bitsDeclared {
					p("\tbits = d.octet()\n")
				} else {
					p("\tbits := d.octet()\n")
					bitsDeclared = true
				}
			}
			if f.goName != "" {
				p("\tm.%s = bits&(1<<%d) != 0\n", f.goName, f.bitPos)
			}
		case f.goName == "":
			p("\td.skip%s()\n", camel(f.amqp))
		case f.amqp == "shortstr":
			// Reuse the string already in m when the bytes are the same:
			// a channel decoding basic.publish into one value allocates
			// no exchange or routing key string per message.
			p("\tm.%s = d.shortstrReuse(m.%s)\n", f.goName, f.goName)
		default:
			p("\tm.%s = d.%s()\n", f.goName, f.amqp)
		}
	}
	p("\treturn d.finish()\n}\n\n")
}

func zero(t string) string {
	switch t {
	case "shortstr", "longstr":
		return `""`
	case "table":
		return "nil"
	case "timestamp":
		return "time.Time{}"
	case "bit":
		return "false"
	}
	return "0"
}
