package main

import (
	"context"

	"go.temporal.io/sdk/client"

	"github.com/roundhouse-rl/roundhouse/internal/connect"
	"github.com/roundhouse-rl/roundhouse/internal/store"
)

// connectBoth connects to Temporal and S3, the pair most commands need;
// the caller closes the client.
func connectBoth(ctx context.Context, e *connect.Endpoints) (client.Client, *store.Store, error) {
	c, err := connect.Temporal(ctx, *e, quietLogger())
	if err != nil {
		return nil, nil, err
	}
	s, err := connect.Store(ctx, *e)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}
