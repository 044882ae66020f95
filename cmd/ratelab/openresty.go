package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/edge"
)

func runOpenResty(ctx context.Context, opts edgeOptions, cfg edge.GatewayConfig, ropts *redis.UniversalOptions) error {
	return errors.New("--engine openresty: not built yet")
}
