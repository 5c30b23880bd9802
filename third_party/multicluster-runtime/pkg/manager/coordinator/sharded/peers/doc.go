/*
Copyright 2025 The Kubernetes Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

/*
Package peers implements a lightweight membership registry for sharding.

Each peer advertises presence via a coordination.k8s.io/Lease named
<prefix>-<peerID> (e.g. mcr-peer-sharded-namespace-0). The registry:

  - upserts our own Lease on a cadence (heartbeat),
  - lists other peer Leases with matching labels/prefix,
  - exposes a stable snapshot for HRW/placement.

This registry only tracks membership; single-writer ownership is enforced
separately via per-cluster fencing Leases.
*/
package peers
