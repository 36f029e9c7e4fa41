package cluster

import "github.com/hashicorp/memberlist"

// openHook, when set (tests only), may change memberlist's config in Open
// just before memberlist starts: health tests install a transport that
// counts bytes and cuts links to simulate partitions.
var openHook func(nodeID string, c *memberlist.Config)
