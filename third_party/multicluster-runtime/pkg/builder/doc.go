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

// Package builder wraps other multicluster-runtime libraries and exposes simple
// patterns for building common Controllers.
//
// This is a fork of the controller-runtime builder package, adapted to´
// mult-cluster use.
//
// Projects built with the builder package can trivially be rebased on top of
// the underlying packages if the project requires more customized behavior in
// the future.
package builder

import (
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

var log = logf.Log.WithName("builder")
