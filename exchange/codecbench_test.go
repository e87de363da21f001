package exchange

import "testing"

func BenchmarkCodecDecodeMessage(b *testing.B) {
	data := encodeMessage(sampleMessages()[0], 1, nil)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := decodeMessage(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCodecEncodeRecord(b *testing.B) {
	r := Table{"id": uint64(7), "durable": true, "args": Table{"x-max-length": int64(10), "x-queue-type": "quorum"}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = encodeRecord(r)
	}
}

func BenchmarkCodecDecodeRecord(b *testing.B) {
	data := encodeRecord(Table{"id": uint64(7), "durable": true, "args": Table{"x-max-length": int64(10), "x-queue-type": "quorum"}})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := decodeRecord(data); err != nil {
			b.Fatal(err)
		}
	}
}
