package grpclimit

import "google.golang.org/grpc/metadata"

// mdHeader gives the client-address logic the values of incoming
// metadata, whose keys are lower case.
type mdHeader metadata.MD

func (h mdHeader) Values(name string) []string { return metadata.MD(h).Get(name) }
