package storetest

import (
	"fmt"
	"testing"

	"github.com/trident-broker/trident/exchange"
)

// RunDurable checks that a durable store keeps its contents across Close
// and reopen in the same directory. open opens the store in dir; the suite
// closes it.
func RunDurable(t *testing.T, open func(t *testing.T, dir string) exchange.Store) {
	t.Run("Reopen", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		must(t, s.PutMeta("vhost/a", []byte("A")))
		must(t, s.PutMeta("vhost/b", []byte("B")))
		must(t, s.PutMeta("gone", []byte("x")))
		must(t, s.DeleteMeta("gone"))
		must(t, s.PutMeta("tmp/1", []byte("x")))
		must(t, s.DeleteMetaPrefix("tmp/"))
		const n = 1000
		for seq := range uint64(n) {
			s.AppendMessage(1, seq, fmt.Appendf(nil, "m%d", seq), nil)
			s.AppendMessage(2, seq, []byte("dropped"), nil)
			if seq%2 == 1 {
				s.DeleteMessage(1, seq) // some cancel in-batch, some not
			}
		}
		must(t, s.DropMessages(2))
		s.AppendMessage(3, 42, []byte("unsynced but closed"), nil)
		must(t, s.Close()) // Close flushes: no Sync needed

		check := func(s exchange.Store) {
			t.Helper()
			eqKV(t, "meta after reopen", loadMeta(t, s, ""), []kv{{"vhost/a", "A"}, {"vhost/b", "B"}})
			var want []msg
			for seq := uint64(0); seq < n; seq += 2 {
				want = append(want, msg{seq, fmt.Sprintf("m%d", seq)})
			}
			eqMsgs(t, "queue 1 after reopen", loadMsgs(t, s, 1), want)
			eqMsgs(t, "queue 2 after reopen", loadMsgs(t, s, 2), nil)
			eqMsgs(t, "queue 3 after reopen", loadMsgs(t, s, 3), []msg{{42, "unsynced but closed"}})
		}
		s = open(t, dir)
		check(s)
		// more work, then a second reopen
		s.DeleteMessage(3, 42)
		appendSync(t, s, 4, 1, "second life")
		must(t, s.Close())
		s = open(t, dir)
		defer closeQuiet(t, s)
		eqMsgs(t, "queue 3 after second reopen", loadMsgs(t, s, 3), nil)
		eqMsgs(t, "queue 4 after second reopen", loadMsgs(t, s, 4), []msg{{1, "second life"}})
		eqKV(t, "meta after second reopen", loadMeta(t, s, ""), []kv{{"vhost/a", "A"}, {"vhost/b", "B"}})
	})
}
