package wire

// AppendConsumerUpdate is the server's ConsumerUpdate request (0x001a):
// subscription id is made active (or asked to step down); the client
// answers with a ConsumerUpdateResponse carrying an offset specification.
func AppendConsumerUpdate(b []byte, corr uint32, id uint8, active bool) []byte {
	b, at := begin(b, KeyConsumerUpdate, 1)
	var a byte
	if active {
		a = 1
	}
	return end(append(be32(b, corr), id, a), at)
}
