package main

import (
	"context"
	"errors"
)

func spRawTarget(ctx context.Context, o *options, t spTarget, n int) ([]spPhase, error) {
	return nil, errors.New("the raw stream-protocol client is not written yet: use --stream-protocol-clients go")
}
