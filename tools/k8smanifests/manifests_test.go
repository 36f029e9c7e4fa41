package k8smanifests

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/config"
)

// dir holds the manifests, from this package's directory.
const dir = "../../deploy/kubernetes"

// manifests are every document of every *.yaml in dir, decoded strictly (an
// unknown or misspelt field fails) into its API type.
type manifests struct {
	sts      []appsv1.StatefulSet
	services map[string]corev1.Service
	secrets  map[string]corev1.Secret
	configs  map[string]corev1.ConfigMap
	pdbs     []policyv1.PodDisruptionBudget
}

func load(t *testing.T) manifests {
	t.Helper()
	m := manifests{services: map[string]corev1.Service{}, secrets: map[string]corev1.Secret{}, configs: map[string]corev1.ConfigMap{}}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---")) {
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if meta.Kind == "" {
				continue // only comments
			}
			into := func(v any) {
				if err := yaml.UnmarshalStrict(doc, v); err != nil {
					t.Fatalf("%s: %s: %v", f, meta.Kind, err)
				}
			}
			switch meta.APIVersion + " " + meta.Kind {
			case "apps/v1 StatefulSet":
				var v appsv1.StatefulSet
				into(&v)
				m.sts = append(m.sts, v)
			case "v1 Service":
				var v corev1.Service
				into(&v)
				m.services[v.Name] = v
			case "v1 Secret":
				var v corev1.Secret
				into(&v)
				m.secrets[v.Name] = v
			case "v1 ConfigMap":
				var v corev1.ConfigMap
				into(&v)
				m.configs[v.Name] = v
			case "policy/v1 PodDisruptionBudget":
				var v policyv1.PodDisruptionBudget
				into(&v)
				m.pdbs = append(m.pdbs, v)
			default:
				t.Fatalf("%s: unexpected %s %s", f, meta.APIVersion, meta.Kind)
			}
		}
	}
	return m
}

// agentFlags are the flag names `tether agent` defines, read from its
// source (cmd/tether/agent.go: f.XxxVar(&v, "name", ...)), so a renamed
// flag fails here without building the binary.
func agentFlags(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "../../cmd/tether/agent.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "f" {
			return true
		}
		if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			name, _ := strconv.Unquote(lit.Value)
			flags[name] = true
		}
		return true
	})
	for _, must := range []string{"config", "join", "bootstrap-expect", "advertise", "cluster-secret-file"} {
		if !flags[must] {
			t.Fatalf("reading agent.go found flags %v, not --%s: the parser here is out of date", flags, must)
		}
	}
	return flags
}

func selects(sel map[string]string, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestManifestsFitTogether(t *testing.T) {
	m := load(t)
	if len(m.sts) != 1 {
		t.Fatalf("want one StatefulSet, got %d", len(m.sts))
	}
	sts := m.sts[0]
	pod := sts.Spec.Template
	labels := pod.Labels
	if !selects(sts.Spec.Selector.MatchLabels, labels) {
		t.Errorf("StatefulSet selector %v does not select its pods %v", sts.Spec.Selector.MatchLabels, labels)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: want Parallel (pods are ready only once the cluster formed)", sts.Spec.PodManagementPolicy)
	}
	if len(sts.Spec.VolumeClaimTemplates) == 0 {
		t.Error("no volumeClaimTemplates: each pod needs its own data volume")
	}

	headless, ok := m.services[sts.Spec.ServiceName]
	if !ok {
		t.Fatalf("serviceName %q: no such Service", sts.Spec.ServiceName)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: want clusterIP None and publishNotReadyAddresses true (the join name must list pods that are not ready yet)", headless.Name)
	}
	clients := 0
	for _, s := range m.services {
		if !selects(s.Spec.Selector, labels) {
			t.Errorf("Service %s selector %v does not select the pods", s.Name, s.Spec.Selector)
		}
		if s.Spec.ClusterIP != corev1.ClusterIPNone {
			clients++
		}
	}
	if clients == 0 {
		t.Error("no client Service")
	}
	if len(m.pdbs) != 1 || !selects(m.pdbs[0].Spec.Selector.MatchLabels, labels) {
		t.Errorf("want one PodDisruptionBudget selecting the pods, got %+v", m.pdbs)
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok && p.TargetPort.IntValue() == 0 {
				t.Errorf("Service %s port %s targets %q: no such container port", s.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Fatalf("readinessProbe: want httpGet /readyz, got %+v", c.ReadinessProbe)
	}

	// The arguments: `agent`, then --flag=value with flags the binary has.
	flags := agentFlags(t)
	if len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Fatalf("args %v: want `agent` first", c.Args)
	}
	args := map[string]string{}
	envs := map[string]bool{}
	for _, e := range c.Env {
		envs[e.Name] = true
	}
	for _, a := range c.Args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("arg %q: want --flag=value", a)
			continue
		}
		if !flags[name] {
			t.Errorf("arg %q: tether agent has no flag --%s", a, name)
		}
		for _, ref := range regexp.MustCompile(`\$\(([A-Z_0-9]+)\)`).FindAllStringSubmatch(value, -1) {
			if !envs[ref[1]] {
				t.Errorf("arg %q refers to $(%s), which the container does not define", a, ref[1])
			}
		}
		args[name] = value
	}
	for _, e := range c.Env {
		if f, ok := strings.CutPrefix(e.Name, "TETHER_"); ok && !flags[strings.ReplaceAll(strings.ToLower(f), "_", "-")] {
			t.Errorf("env %s: tether agent has no flag --%s", e.Name, strings.ReplaceAll(strings.ToLower(f), "_", "-"))
		}
	}
	if args["join"] != headless.Name {
		t.Errorf("--join=%s: want the headless Service %s", args["join"], headless.Name)
	}
	if want := strconv.Itoa(int(*sts.Spec.Replicas)); args["bootstrap-expect"] != want {
		t.Errorf("--bootstrap-expect=%s: want the replicas, %s", args["bootstrap-expect"], want)
	}
	if _, port, _ := strings.Cut(args["admin-addr"], ":"); strconv.Itoa(int(ports["admin"])) != port || c.ReadinessProbe.HTTPGet.Port.String() != "admin" {
		t.Errorf("--admin-addr=%s, admin port %d, readiness on %s: they must agree", args["admin-addr"], ports["admin"], c.ReadinessProbe.HTTPGet.Port.String())
	}

	// Every file argument lives on a mount, and each mount's source exists.
	mounts := map[string]corev1.Volume{}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	claims := map[string]bool{}
	for _, vc := range sts.Spec.VolumeClaimTemplates {
		claims[vc.Name] = true
	}
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok && !claims[vm.Name] {
			t.Errorf("volumeMount %s: no such volume or claim", vm.Name)
		}
		mounts[vm.MountPath] = v
	}
	if _, ok := mounts[args["data-dir"]]; !ok || !claims[func() string {
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == args["data-dir"] {
				return vm.Name
			}
		}
		return ""
	}()] {
		t.Errorf("--data-dir=%s must be a volumeClaimTemplate's mount", args["data-dir"])
	}
	for _, flag := range []string{"config", "cluster-secret-file", "admin-token-file"} {
		path := args[flag]
		v, ok := mounts[filepath.Dir(path)]
		if !ok {
			t.Errorf("--%s=%s: no volume mounted at %s", flag, path, filepath.Dir(path))
			continue
		}
		key := filepath.Base(path)
		switch {
		case v.Secret != nil:
			s, ok := m.secrets[v.Secret.SecretName]
			if _, has := s.StringData[key]; !ok || !has {
				t.Errorf("--%s=%s: Secret %s has no key %s", flag, path, v.Secret.SecretName, key)
			}
		case v.ConfigMap != nil:
			cm, ok := m.configs[v.ConfigMap.Name]
			data, has := cm.Data[key]
			if !ok || !has {
				t.Errorf("--%s=%s: ConfigMap %s has no key %s", flag, path, v.ConfigMap.Name, key)
				continue
			}
			checkConfig(t, key, data)
		default:
			t.Errorf("--%s=%s: want a Secret or ConfigMap volume", flag, path)
		}
	}
	if pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.RunAsNonRoot == nil || !*pod.Spec.SecurityContext.RunAsNonRoot {
		t.Error("pods must run as non-root")
	}
	if !slices.Contains(c.Args, "--advertise=$(POD_IP)") {
		t.Error("want --advertise=$(POD_IP): peers must reach each pod at its own address")
	}
}

// checkConfig loads the ConfigMap's config as tether would, strictly.
func checkConfig(t *testing.T, name, data string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := config.LoadWith(path, config.LoadOptions{Strict: true})
	if err == nil {
		if errs := proxy.Compile(cfg); len(errs) > 0 {
			err = errs
		}
	}
	if err != nil || len(warnings) > 0 {
		t.Errorf("ConfigMap %s: %v %v", name, err, warnings)
	}
}
