package frame

import "testing"

func BenchmarkCodecAppendPublish(b *testing.B) {
	p := &Publish{ID: 1, VHost: "/", Queue: "q", Msg: fullMessage()}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		if buf, err = Append(buf[:0], p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCodecAppendPublishNoHeaders(b *testing.B) {
	m := fullMessage()
	m.Props.Headers = nil
	p := &Publish{ID: 1, VHost: "/", Queue: "q", Msg: m}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var err error
		if buf, err = Append(buf[:0], p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCodecDecodePublish(b *testing.B) {
	out, _ := Append(nil, &Publish{ID: 1, VHost: "/", Queue: "q", Msg: fullMessage()})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Decode(out[HeaderSize:]); err != nil {
			b.Fatal(err)
		}
	}
}
