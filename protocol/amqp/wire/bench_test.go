package wire

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

var (
	benchBody  = []byte("0123456789abcdef") // 16 bytes, the LavinMQ benchmark size
	benchProps = Properties{ContentType: "application/octet-stream", DeliveryMode: 2}
)

// publishBytes is a basic.publish, its content header and a 16-byte body as
// a client sends them.
func publishBytes(b testing.TB) []byte {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	pub := &BasicPublish{Exchange: "amq.direct", RoutingKey: "bench.key"}
	if err := WriteContent(w, 1, pub, &benchProps, benchBody, 131072); err != nil {
		b.Fatal(err)
	}
	w.Flush()
	return out.Bytes()
}

// BenchmarkDecodePublish decodes the method and content header payloads of
// a publish (the frames already read).
func BenchmarkDecodePublish(b *testing.B) {
	in := publishBytes(b)
	mf, n, _ := ParseFrame(in, 0)
	hf, _, _ := ParseFrame(in[n:], 0)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := DecodeMethod(mf.Payload)
		if err != nil {
			b.Fatal(err)
		}
		_ = m.(*BasicPublish)
		if _, _, _, err := DecodeContentHeader(hf.Payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadDecodePublish reads the three frames of a publish from a
// bufio.Reader, reusing one payload buffer, and decodes method and header.
func BenchmarkReadDecodePublish(b *testing.B) {
	in := publishBytes(b)
	src := bytes.NewReader(in)
	r := bufio.NewReaderSize(src, 65536)
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(in)
		r.Reset(src)
		f, err := ReadFrame(r, 131072, buf)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeMethod(f.Payload); err != nil {
			b.Fatal(err)
		}
		if f, err = ReadFrame(r, 131072, buf); err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := DecodeContentHeader(f.Payload); err != nil {
			b.Fatal(err)
		}
		if _, err = ReadFrame(r, 131072, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteDeliver encodes a basic.deliver, its content header and a
// 16-byte body into a bufio.Writer, as a consumer's writer does.
func BenchmarkWriteDeliver(b *testing.B) {
	w := bufio.NewWriterSize(io.Discard, 65536)
	d := &BasicDeliver{ConsumerTag: "amq.ctag-0123456789abcdef", Exchange: "amq.direct", RoutingKey: "bench.key"}
	b.SetBytes(int64(len(benchBody)))
	b.ReportAllocs()
	for b.Loop() {
		d.DeliveryTag++
		if err := WriteContent(w, 1, d, &benchProps, benchBody, 131072); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteDeliverHeaders is BenchmarkWriteDeliver with a headers table.
func BenchmarkWriteDeliverHeaders(b *testing.B) {
	w := bufio.NewWriterSize(io.Discard, 65536)
	d := &BasicDeliver{ConsumerTag: "amq.ctag-0123456789abcdef", Exchange: "amq.direct", RoutingKey: "bench.key"}
	p := benchProps
	p.Headers = Table{"x-trace": "abc", "count": int32(3)}
	b.ReportAllocs()
	for b.Loop() {
		d.DeliveryTag++
		if err := WriteContent(w, 1, d, &p, benchBody, 131072); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteDeliverLarge writes a 1 MiB body split into frames.
func BenchmarkWriteDeliverLarge(b *testing.B) {
	w := bufio.NewWriterSize(io.Discard, 65536)
	d := &BasicDeliver{ConsumerTag: "ctag", Exchange: "amq.direct", RoutingKey: "bench.key"}
	body := make([]byte, 1<<20)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteContent(w, 1, d, &benchProps, body, 131072); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteMethodAck(b *testing.B) {
	w := bufio.NewWriterSize(io.Discard, 65536)
	ack := &BasicAck{}
	b.ReportAllocs()
	for b.Loop() {
		ack.DeliveryTag++
		if err := WriteMethod(w, 1, ack); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePublishReused decodes a publish into a reused struct via
// SplitMethod, as a channel's hot path can.
func BenchmarkDecodePublishReused(b *testing.B) {
	in := publishBytes(b)
	mf, n, _ := ParseFrame(in, 0)
	hf, _, _ := ParseFrame(in[n:], 0)
	var pub BasicPublish
	b.ReportAllocs()
	for b.Loop() {
		_, _, args, err := SplitMethod(mf.Payload)
		if err != nil {
			b.Fatal(err)
		}
		if err := pub.DecodeArgs(args); err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := DecodeContentHeader(hf.Payload); err != nil {
			b.Fatal(err)
		}
	}
}
