// Package k8smanifests checks tether's Kubernetes manifests
// (deploy/kubernetes/*.yaml: a StatefulSet, the headless join Service, the
// client Service, a Secret, a ConfigMap and a PodDisruptionBudget): its test
// parses each into the official API types and checks that they fit together
// and that the container arguments are flags `tether agent` accepts. It lives
// in the tools module so that the product's go.mod does not require
// k8s.io/api. It has no code.
package k8smanifests
