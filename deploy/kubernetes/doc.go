// Package kubernetes holds tether's Kubernetes manifests (*.yaml: a
// StatefulSet, the headless join Service, the client Service, a Secret, a
// ConfigMap and a PodDisruptionBudget) and the test that parses each into
// the official API types and checks that they fit together and that the
// container arguments are flags `tether agent` accepts. It has no code.
package kubernetes
