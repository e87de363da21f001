package exchange

import (
	"errors"

	"github.com/trident-broker/trident/exchange/internal/memstore"
)

// fakeStore is the in-memory Store the core's tests run on
// (exchange/internal/memstore, which exchange/streamlog's tests share),
// with the helpers that decode the core's records.
type fakeStore struct {
	*memstore.Store
}

var _ Store = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	return &fakeStore{memstore.New()}
}

// storedMessages decodes the stored messages of qid in seq order.
func (s *fakeStore) storedMessages(qid uint64) ([]*Message, error) {
	var out []*Message
	err := s.LoadMessages(qid, func(_ uint64, data []byte) error {
		m, _, err := decodeMessage(data)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	return out, err
}

func (s *fakeStore) metaRecord(key string) (Table, error) {
	s.Mu.Lock()
	v, ok := s.Meta[key]
	s.Mu.Unlock()
	if !ok {
		return nil, errors.New("no such key")
	}
	return decodeRecord(v)
}
