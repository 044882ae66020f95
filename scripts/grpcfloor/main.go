// Command grpcfloor is the floor under a rate limit service written in Go:
// Envoy's RateLimitService on grpc-go, answering every call OK, each of its
// descriptors OK, and deciding nothing. scripts/bench-rls.sh loads it as it
// loads ratelab rls and envoyproxy/ratelimit, and its CPU per call is what
// the gRPC server alone costs on the machine, under which no service that
// decides can go.
//
//	go run ./scripts/grpcfloor -listen 127.0.0.1:8081
package main

import (
	"context"
	"flag"
	"log"
	"net"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type floor struct {
	pb.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit admits every call, and says so of each descriptor.
func (floor) ShouldRateLimit(_ context.Context, r *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	st := make([]*pb.RateLimitResponse_DescriptorStatus, len(r.GetDescriptors()))
	for i := range st {
		st[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	}
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: st}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address of the gRPC service")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(s, floor{})
	log.Fatal(s.Serve(l))
}
