// Package deploy holds the container image's build script, the compose
// file and the Kubernetes manifests. No container engine runs where CI
// does, so these tests check what a reviewer would: that every file parses
// and that the pieces agree with each other and with the binary.
package deploy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/plantstore/plantstore/internal/apitest"
)

// afterShutdown is how long a stop may take once --shutdown-timeout has
// run out (docs/operations.md): the last token-use times (up to 5 s),
// closing the store (2 s), a log its reader stalls (4 s).
const afterShutdown = 11 * time.Second

// Every YAML file here parses, each of its documents.
func TestManifestsParse(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		docs := decodeAll(t, path)
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", path)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Errorf("found %d YAML files; expected compose.yaml and the k8s manifests", n)
	}
}

// decodeAll returns the documents of a YAML file, failing the test if one
// does not parse.
func decodeAll(t *testing.T, path string) []*yaml.Node {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, &doc)
	}
}

// decodeFile decodes the one document of a YAML file into v.
func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	docs := decodeAll(t, path)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", path, len(docs))
	}
	if err := docs[0].Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

type composeFile struct {
	Services map[string]composeService
	Volumes  map[string]any
	Networks map[string]struct {
		IPAM struct {
			Config []struct{ Subnet string }
		} `yaml:"ipam"`
	}
}

// interpolate replaces compose's ${VAR:-default} with its default, and
// ${VAR:?message} and ${VAR} with "SET", as a run with the variable unset
// (or, for the required ones, set) would read.
func interpolate(s string) string {
	return regexp.MustCompile(`\$\{(\w+)(?::-([^}]*)|:\?[^}]*)?\}`).ReplaceAllStringFunc(s, func(m string) string {
		if _, def, ok := strings.Cut(m, ":-"); ok {
			return strings.TrimSuffix(def, "}")
		}
		return "SET"
	})
}

type composeService struct {
	Build *struct {
		Context    string
		Dockerfile string
	}
	Image       string
	Command     []string
	Entrypoint  []string
	User        string
	DependsOn   dependsOn `yaml:"depends_on"`
	Environment map[string]string
	Ports       []string
	Volumes     []string
	Healthcheck *struct{ Test []string }
	Networks    serviceNetworks
	NetworkMode string `yaml:"network_mode"`
	StopGrace   string `yaml:"stop_grace_period"`
}

// serviceNetworks is a service's networks, a list of names or a map of
// them to their settings: network name to its fixed IPv4 address ("" if
// none).
type serviceNetworks map[string]string

func (sn *serviceNetworks) UnmarshalYAML(n *yaml.Node) error {
	*sn = serviceNetworks{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			(*sn)[s] = ""
		}
		return nil
	}
	var m map[string]*struct {
		IPv4Address string `yaml:"ipv4_address"`
	}
	if err := n.Decode(&m); err != nil {
		return err
	}
	for name, v := range m {
		(*sn)[name] = ""
		if v != nil {
			(*sn)[name] = v.IPv4Address
		}
	}
	return nil
}

// dependsOn is compose's depends_on, a list of services or a map of them
// to their conditions: service name to condition ("" in the list form).
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var names []string
		if err := n.Decode(&names); err != nil {
			return err
		}
		for _, s := range names {
			(*d)[s] = ""
		}
		return nil
	}
	var m map[string]struct{ Condition string }
	if err := n.Decode(&m); err != nil {
		return err
	}
	for s, c := range m {
		(*d)[s] = c.Condition
	}
	return nil
}

var instances = []string{"plantstore-1", "plantstore-2", "plantstore-3"}

// compose.yaml: three instances of the image built from the repository's
// Dockerfile, on PostgreSQL, behind a load balancer that checks /readyz.
func TestCompose(t *testing.T) {
	var c composeFile
	decodeFile(t, "compose.yaml", &c)

	pg, ok := c.Services["postgres"]
	if !ok {
		t.Fatal("compose.yaml has no postgres service")
	}
	if !strings.HasPrefix(pg.Image, "postgres:") {
		t.Errorf("postgres image %q", pg.Image)
	}
	if pg.Healthcheck == nil || !slices.Contains(pg.Healthcheck.Test, "pg_isready") {
		t.Errorf("postgres has no pg_isready health check: %+v", pg.Healthcheck)
	}
	if len(pg.Volumes) == 0 || !c.hasVolume(pg.Volumes[0]) {
		t.Errorf("postgres keeps its data in no named volume: %v", pg.Volumes)
	}

	var image string
	for _, name := range instances {
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("compose.yaml has no service %s", name)
			continue
		}
		if s.Build == nil {
			t.Errorf("%s: no build section", name)
		} else if dockerfile := filepath.Join(s.Build.Context, s.Build.Dockerfile); filepath.Clean(dockerfile) != filepath.Join("..", "Dockerfile") {
			t.Errorf("%s builds %s, not the repository's Dockerfile", name, dockerfile)
		}
		if image == "" {
			image = s.Image
		}
		if s.Image == "" || s.Image != image {
			t.Errorf("%s: image %q; every instance runs one image (%q)", name, s.Image, image)
		}
		if s.DependsOn["postgres"] != "service_healthy" {
			t.Errorf("%s does not wait for postgres to be healthy: %v", name, s.DependsOn)
		}
		db := s.Environment["PLANTSTORE_DB"]
		if !strings.HasPrefix(db, "postgres://") || !strings.Contains(db, "@postgres:5432/") {
			t.Errorf("%s: PLANTSTORE_DB %q does not name the postgres service", name, db)
		}
		if len(s.Ports) > 0 {
			t.Errorf("%s publishes %v; only the load balancer should", name, s.Ports)
		}
		// A rolling restart loses no request: the instance drains longer
		// than HAProxy takes to mark it down (2 checks 2 s apart), and
		// SIGKILL waits for the drain and --shutdown-timeout (30 s).
		drain, err := time.ParseDuration(s.Environment["PLANTSTORE_DRAIN_DELAY"])
		if err != nil || drain <= 4*time.Second {
			t.Errorf("%s: PLANTSTORE_DRAIN_DELAY %q; want more than HAProxy's 4 s to take it out", name, s.Environment["PLANTSTORE_DRAIN_DELAY"])
		}
		if grace, err := time.ParseDuration(s.StopGrace); err != nil || grace <= drain+30*time.Second+afterShutdown {
			t.Errorf("%s: stop_grace_period %q leaves no margin over the drain (%v), --shutdown-timeout (30 s) and what follows it (%v)", name, s.StopGrace, drain, afterShutdown)
		}
	}

	// The load balancer: the service that mounts haproxy.cfg, publishing the
	// API, sending to each instance, checking /readyz.
	var lb string
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			if strings.HasPrefix(v, "./haproxy.cfg:") {
				lb = name
			}
		}
	}
	if lb == "" {
		t.Fatal("no service mounts ./haproxy.cfg")
	}
	if len(c.Services[lb].Ports) != 1 || !strings.HasSuffix(c.Services[lb].Ports[0], ":8080") {
		t.Errorf("%s publishes %v, want the frontend's port 8080", lb, c.Services[lb].Ports)
	}
	cfg, err := os.ReadFile("haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	servers := regexp.MustCompile(`(?m)^\s*server\s+(\S+)\s+(\S+):8080\b`).FindAllStringSubmatch(string(cfg), -1)
	var targets []string
	for _, m := range servers {
		targets = append(targets, m[2])
	}
	slices.Sort(targets)
	if !slices.Equal(targets, instances) {
		t.Errorf("haproxy.cfg sends to %v, want %v", targets, instances)
	}
	// The headers the instances trust from it are HAProxy's, not a
	// client's: the address, and the URL the links are built from.
	for _, want := range []string{"balance roundrobin", "uri /readyz", "expect status 200", "bind :8080",
		"http-request set-header X-Forwarded-For %[src]", "http-request set-header X-Forwarded-Proto http",
		"http-request del-header X-Forwarded-Host", "http-request del-header Forwarded"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("haproxy.cfg lacks %q", want)
		}
	}
	for _, name := range instances {
		if _, ok := c.Services[lb].DependsOn[name]; !ok {
			t.Errorf("%s does not depend on %s", lb, name)
		}
	}
	checkProxyTrust(t, c, lb)
	checkDatabaseTLS(t, c)
}

// The instances trust X-Forwarded-For from the load balancer's address
// alone, a fixed address in the subnet of their shared network, and the
// load balancer replaces the header rather than append to a client's.
func checkProxyTrust(t *testing.T, c composeFile, lb string) {
	t.Helper()
	var lbAddr netip.Addr
	var lbNet string
	for name, addr := range c.Services[lb].Networks {
		if a, err := netip.ParseAddr(interpolate(addr)); err == nil {
			lbAddr, lbNet = a, name
		}
	}
	if !lbAddr.IsValid() {
		t.Fatalf("%s has no fixed address (ipv4_address) on any network: %v", lb, c.Services[lb].Networks)
	}
	var subnet netip.Prefix
	for _, cfg := range c.Networks[lbNet].IPAM.Config {
		if p, err := netip.ParsePrefix(interpolate(cfg.Subnet)); err == nil {
			subnet = p
		}
	}
	if !subnet.IsValid() || !subnet.Contains(lbAddr) {
		t.Errorf("%s's address %s is not in network %s's fixed subnet %v", lb, lbAddr, lbNet, subnet)
	}
	for _, name := range instances {
		s := c.Services[name]
		if _, ok := s.Networks[lbNet]; !ok {
			t.Errorf("%s is not on %s's network %s", name, lb, lbNet)
		}
		trusted := interpolate(s.Environment["PLANTSTORE_TRUSTED_PROXIES"])
		var got []netip.Prefix
		for field := range strings.SplitSeq(trusted, ",") {
			field = strings.TrimSpace(field)
			p, err := netip.ParsePrefix(field)
			if err != nil {
				a, aerr := netip.ParseAddr(field)
				if aerr != nil {
					t.Errorf("%s: PLANTSTORE_TRUSTED_PROXIES entry %q is not an address or a prefix", name, field)
					continue
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			got = append(got, p)
		}
		if len(got) != 1 || got[0].Bits() != lbAddr.BitLen() || got[0].Addr() != lbAddr {
			t.Errorf("%s trusts X-Forwarded-For from %q; want the load balancer's address %s alone", name, trusted, lbAddr)
		}
	}

	cfg, err := os.ReadFile("haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	frontend := haproxySection(string(cfg), "frontend")
	if !regexp.MustCompile(`(?m)^\s*http-request\s+set-header\s+X-Forwarded-For\s+%\[src\]\s*$`).MatchString(frontend) {
		t.Error("haproxy.cfg's frontend does not replace X-Forwarded-For with the address it sees (http-request set-header X-Forwarded-For %[src])")
	}
	if regexp.MustCompile(`(?m)^\s*option\s+forwardfor\b`).MatchString(string(cfg)) {
		t.Error("haproxy.cfg has option forwardfor, which keeps the client's X-Forwarded-For and appends to it")
	}
	if !regexp.MustCompile(`(?m)^\s*http-request\s+del-header\s+Forwarded\s*$`).MatchString(frontend) {
		t.Error("haproxy.cfg's frontend passes on the client's Forwarded header")
	}
}

// haproxySection returns the lines of the first section of kind (global,
// defaults, frontend, backend...) in an HAProxy configuration.
func haproxySection(cfg, kind string) string {
	var out []string
	in := false
	for line := range strings.SplitSeq(cfg, "\n") {
		if line != "" && line[0] != ' ' && line[0] != '\t' && line[0] != '#' {
			if in {
				break
			}
			in = strings.HasPrefix(line, kind+" ") || line == kind
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// The instances reach PostgreSQL over TLS, verifying it (verify-full)
// against the CA that pg-tls makes before PostgreSQL starts, and
// PostgreSQL refuses network connections without TLS or SCRAM.
func checkDatabaseTLS(t *testing.T, c composeFile) {
	t.Helper()
	tlsSvc, ok := c.Services["pg-tls"]
	if !ok {
		t.Fatal("compose.yaml has no pg-tls service to make PostgreSQL's certificate")
	}
	if !slices.Contains(tlsSvc.Entrypoint, "/pg-tls.sh") || !slices.Contains(tlsSvc.Volumes, "./pg-tls.sh:/pg-tls.sh:ro") {
		t.Errorf("pg-tls does not run ./pg-tls.sh: entrypoint %v, volumes %v", tlsSvc.Entrypoint, tlsSvc.Volumes)
	}
	mountOf := func(s composeService, target string) string { // the volume mounted at target
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == target {
				return parts[0]
			}
		}
		return ""
	}
	caVolume, tlsVolume := mountOf(tlsSvc, "/ca"), mountOf(tlsSvc, "/tls")
	if !c.hasVolume(caVolume) || !c.hasVolume(tlsVolume) || caVolume == tlsVolume {
		t.Fatalf("pg-tls writes to volumes %q and %q; want two named volumes, the CA's and the server's", caVolume, tlsVolume)
	}

	pg := c.Services["postgres"]
	if pg.DependsOn["pg-tls"] != "service_completed_successfully" {
		t.Errorf("postgres does not wait for pg-tls: %v", pg.DependsOn)
	}
	settings := map[string]string{}
	for i, arg := range pg.Command {
		if arg == "-c" && i+1 < len(pg.Command) {
			k, v, _ := strings.Cut(pg.Command[i+1], "=")
			settings[k] = v
		}
	}
	tlsDir := ""
	for _, v := range pg.Volumes {
		if parts := strings.Split(v, ":"); parts[0] == tlsVolume && len(parts) >= 2 {
			tlsDir = parts[1]
		}
	}
	if settings["ssl"] != "on" || tlsDir == "" || settings["ssl_cert_file"] != tlsDir+"/server.crt" || settings["ssl_key_file"] != tlsDir+"/server.key" {
		t.Errorf("postgres: ssl settings %v with %s mounted at %q; want ssl=on and pg-tls's certificate and key", settings, tlsVolume, tlsDir)
	}
	if mountOf(pg, "/ca") != "" || mountOf(pg, tlsDir) != tlsVolume {
		t.Errorf("postgres mounts %v", pg.Volumes)
	}
	hba := mountOf(pg, settings["hba_file"])
	if hba == "" {
		t.Fatalf("postgres: hba_file %q is not mounted from the repository", settings["hba_file"])
	}
	b, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	network := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || f[0] == "local" {
			continue
		}
		network++
		if f[0] != "hostssl" || f[len(f)-1] != "scram-sha-256" {
			t.Errorf("%s: %q: every network rule must be hostssl ... scram-sha-256", hba, line)
		}
	}
	if network == 0 {
		t.Errorf("%s allows no network connection", hba)
	}

	for _, name := range instances {
		s := c.Services[name]
		u, err := url.Parse(interpolate(s.Environment["PLANTSTORE_DB"]))
		if err != nil {
			t.Errorf("%s: PLANTSTORE_DB does not parse: %v", name, err)
			continue
		}
		q := u.Query()
		root := q.Get("sslrootcert")
		if q.Get("sslmode") != "verify-full" || path.Dir(root) == "." || mountOf(s, path.Dir(root)) != caVolume || path.Base(root) != "ca.crt" {
			t.Errorf("%s: sslmode=%q sslrootcert=%q with volumes %v; want verify-full against ca.crt of the volume %s", name, q.Get("sslmode"), root, s.Volumes, caVolume)
		}
		if mountOf(s, "/etc/plantstore/tls") != "" || slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasPrefix(v, tlsVolume+":") }) {
			t.Errorf("%s mounts PostgreSQL's key volume: %v", name, s.Volumes)
		}
	}
}

// pg-tls.sh makes a CA and a certificate for "postgres" that a client
// trusting only that CA accepts for that name, keeps the key 0600 and the
// CA's key nowhere, and leaves them alone when run again.
func TestPgTLSScript(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl to run pg-tls.sh with")
	}
	dir := t.TempDir()
	caDir, tlsDir := filepath.Join(dir, "ca"), filepath.Join(dir, "tls")
	run := func() {
		t.Helper()
		cmd := exec.Command("sh", "pg-tls.sh")
		cmd.Env = append(os.Environ(), "CA_DIR="+caDir, "TLS_DIR="+tlsDir, "KEY_OWNER=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("pg-tls.sh: %v\n%s", err, out)
		}
	}
	run()
	for dir, want := range map[string][]string{caDir: {"ca.crt"}, tlsDir: {"server.crt", "server.key"}} {
		if names := apitest.DirNames(t, dir); !slices.Equal(names, want) {
			t.Errorf("%s holds %v, want %v (the CA's key must not be kept)", filepath.Base(dir), names, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(tlsDir, "server.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("server.key: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(caDir, "ca.crt")); err != nil || fi.Mode().Perm()&0o004 == 0 {
		t.Errorf("ca.crt: %v, %v; the instances' non-root user must read it", fi.Mode(), err)
	}

	// A TLS handshake as the instances make it: trusting this CA alone,
	// for the name postgres.
	cert, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, "server.crt"), filepath.Join(tlsDir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				c.(*tls.Conn).Handshake()
				c.Read(make([]byte, 1)) // until the client hangs up
			}()
		}
	}()
	handshake := func(serverName string) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(),
			&tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := handshake("postgres"); err != nil {
		t.Errorf("a client verifying postgres against ca.crt: %v", err)
	}
	if err := handshake("db.example.com"); err == nil {
		t.Error("the certificate is accepted for another name")
	}

	before, _ := os.ReadFile(filepath.Join(tlsDir, "server.crt"))
	run()
	if after, _ := os.ReadFile(filepath.Join(tlsDir, "server.crt")); !bytes.Equal(before, after) {
		t.Error("a second run replaced the certificate")
	}
}

func (c composeFile) hasVolume(spec string) bool {
	_, ok := c.Volumes[strings.SplitN(spec, ":", 2)[0]]
	return ok
}

// The Kubernetes objects, by kind.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   struct {
		Name      string
		Namespace string
		Labels    map[string]string
	}
}

type deployment struct {
	object `yaml:",inline"`
	Spec   struct {
		Replicas int
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		Template struct {
			Metadata struct{ Labels map[string]string }
			Spec     podSpec
		}
	}
}

type podSpec struct {
	SecurityContext               securityContext `yaml:"securityContext"`
	TerminationGracePeriodSeconds int             `yaml:"terminationGracePeriodSeconds"`
	EnableServiceLinks            *bool           `yaml:"enableServiceLinks"`
	Containers                    []container
	Volumes                       []struct {
		Name   string
		Secret *struct {
			SecretName string `yaml:"secretName"`
			Items      []struct{ Key, Path string }
		}
	}
}

type securityContext struct {
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	RunAsUser                *int  `yaml:"runAsUser"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	Capabilities             struct{ Drop []string }
	SeccompProfile           struct{ Type string } `yaml:"seccompProfile"`
}

type container struct {
	Name  string
	Image string
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	Env []struct {
		Name      string
		Value     *string
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	}
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	SecurityContext securityContext `yaml:"securityContext"`
	Resources       struct {
		Requests, Limits map[string]string
	}
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop *struct {
			Sleep *struct{ Seconds int }
		} `yaml:"preStop"`
	}
}

type probe struct {
	HTTPGet *struct {
		Path string
		Port yaml.Node // a name or a number
	} `yaml:"httpGet"`
}

type service struct {
	object `yaml:",inline"`
	Spec   struct {
		Type     string
		Selector map[string]string
		Ports    []struct {
			Port       int
			TargetPort yaml.Node `yaml:"targetPort"`
		}
	}
}

type secret struct {
	object     `yaml:",inline"`
	StringData map[string]string `yaml:"stringData"`
	Data       map[string]string
}

type networkPolicy struct {
	object `yaml:",inline"`
	Spec   struct {
		PodSelector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"podSelector"`
		PolicyTypes []string `yaml:"policyTypes"`
		Ingress     []struct {
			From []struct {
				NamespaceSelector *struct {
					MatchLabels map[string]string `yaml:"matchLabels"`
				} `yaml:"namespaceSelector"`
				PodSelector *struct{}              `yaml:"podSelector"`
				IPBlock     *struct{ CIDR string } `yaml:"ipBlock"`
			}
			Ports []struct {
				Port     yaml.Node
				Protocol string
			}
		}
	}
}

type k8s struct {
	deployment    deployment
	service       service
	secret        secret
	networkPolicy networkPolicy
	pdb           struct {
		object `yaml:",inline"`
		Spec   struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			}
		}
	}
}

// loadK8s decodes every manifest in k8s/, one object of each kind.
func loadK8s(t *testing.T) k8s {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k k8s
	seen := map[string]string{}
	for _, f := range files {
		for _, doc := range decodeAll(t, f) {
			var o object
			if err := doc.Decode(&o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Metadata.Namespace != "" {
				t.Errorf("%s: %s %s names namespace %q; the manifests leave it to kubectl -n", f, o.Kind, o.Metadata.Name, o.Metadata.Namespace)
			}
			var target any
			switch o.Kind {
			case "Deployment":
				target = &k.deployment
			case "Service":
				target = &k.service
			case "Secret":
				target = &k.secret
			case "PodDisruptionBudget":
				target = &k.pdb
			case "NetworkPolicy":
				target = &k.networkPolicy
			case "Kustomization":
				continue
			default:
				t.Errorf("%s: unexpected kind %q", f, o.Kind)
				continue
			}
			if prev, ok := seen[o.Kind]; ok {
				t.Fatalf("%s: a second %s (the first in %s)", f, o.Kind, prev)
			}
			seen[o.Kind] = f
			if err := doc.Decode(target); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	for _, kind := range []string{"Deployment", "Service", "Secret", "PodDisruptionBudget", "NetworkPolicy"} {
		if seen[kind] == "" {
			t.Fatalf("k8s/ has no %s", kind)
		}
	}
	return k
}

// portMatches reports whether a probe's or a Service's port (a name or a
// number) is the container's port.
func portMatches(n yaml.Node, name string, number int) bool {
	if i, err := strconv.Atoi(n.Value); err == nil {
		return i == number
	}
	return n.Value != "" && n.Value == name
}

func TestKubernetes(t *testing.T) {
	k := loadK8s(t)
	d := k.deployment
	if d.Spec.Replicas < 2 {
		t.Errorf("Deployment runs %d replicas; several instances are the point", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	// Two ports: the API's (PLANTSTORE_ADDR) and the metrics listener's
	// (PLANTSTORE_METRICS_ADDR), each listening on every interface.
	if len(c.Ports) != 2 || c.Ports[0].ContainerPort != 8080 || c.Ports[1].ContainerPort != 9090 {
		t.Fatalf("container ports %+v, want 8080 (PLANTSTORE_ADDR) and 9090 (PLANTSTORE_METRICS_ADDR)", c.Ports)
	}
	portName, port := c.Ports[0].Name, c.Ports[0].ContainerPort
	metricsName, metricsPort := c.Ports[1].Name, c.Ports[1].ContainerPort
	env := map[string]string{}
	for _, e := range c.Env {
		if e.Value != nil {
			env[e.Name] = *e.Value
		}
	}
	for name, p := range map[string]int{"PLANTSTORE_ADDR": port, "PLANTSTORE_METRICS_ADDR": metricsPort} {
		if addr := env[name]; addr != "0.0.0.0:"+strconv.Itoa(p) && addr != ":"+strconv.Itoa(p) {
			t.Errorf("%s %q does not listen on the container port %d", name, addr, p)
		}
	}

	// Readiness on the API's port, which serves the clients; liveness on
	// the metrics listener, which --max-connections does not cap, so that
	// clients holding every connection cannot fail it.
	for _, p := range []struct {
		name     string
		probe    *probe
		path     string
		portName string
		port     int
	}{
		{"readinessProbe", c.ReadinessProbe, "/readyz", portName, port},
		{"livenessProbe", c.LivenessProbe, "/healthz", metricsName, metricsPort},
	} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no %s with httpGet", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || !portMatches(p.probe.HTTPGet.Port, p.portName, p.port) {
			t.Errorf("%s asks %s on port %q, want %s on the container port %s (%d)", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.Value, p.path, p.portName, p.port)
		}
	}

	// Not root, by the pod's or the container's settings.
	nonRoot := c.SecurityContext.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = pod.SecurityContext.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Error("runAsNonRoot is not true")
	}
	for _, u := range []*int{pod.SecurityContext.RunAsUser, c.SecurityContext.RunAsUser} {
		if u != nil && *u == 0 {
			t.Error("runAsUser is 0")
		}
	}
	sc := c.SecurityContext
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Error("capabilities do not drop ALL")
	}
	if pod.SecurityContext.SeccompProfile.Type != "RuntimeDefault" && sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Error("no RuntimeDefault seccomp profile")
	}
	if c.Resources.Limits["memory"] == "" || c.Resources.Requests["memory"] == "" {
		t.Errorf("memory requests and limits: %+v", c.Resources)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks is not false: a Service called plantstore would inject PLANTSTORE_* variables, which plantstore reads as flags")
	}
	// serve's --shutdown-timeout is 30 s, after the preStop pause.
	pause := 0
	if c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pause = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if time.Duration(pod.TerminationGracePeriodSeconds)*time.Second <= time.Duration(pause+30)*time.Second+afterShutdown {
		t.Errorf("terminationGracePeriodSeconds %d leaves no margin over the preStop pause (%d s), --shutdown-timeout (30 s) and what follows it (%v)", pod.TerminationGracePeriodSeconds, pause, afterShutdown)
	}

	// The database URL comes from the Secret: PLANTSTORE_DB from a key of
	// it, or PLANTSTORE_DB_FILE naming a file of a volume made of it.
	if _, ok := env["PLANTSTORE_DB"]; ok {
		t.Error("PLANTSTORE_DB is a plain value; the URL belongs in the Secret")
	}
	s := k.secret
	fromSecret := false
	for _, e := range c.Env {
		if e.Name == "PLANTSTORE_DB" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			fromSecret = ref.Name == s.Metadata.Name && s.hasKey(ref.Key)
		}
	}
	if file, ok := env["PLANTSTORE_DB_FILE"]; ok {
		for _, m := range c.VolumeMounts {
			rel, err := filepath.Rel(m.MountPath, file)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			for _, v := range pod.Volumes {
				if v.Name != m.Name || v.Secret == nil || v.Secret.SecretName != s.Metadata.Name {
					continue
				}
				key := rel // without items, each key is a file
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						key = it.Key
					}
				}
				fromSecret = s.hasKey(key)
			}
		}
	}
	if !fromSecret {
		t.Errorf("the database URL does not come from the Secret %s", s.Metadata.Name)
	}
	for key, v := range s.StringData {
		if !strings.HasPrefix(v, "postgres://") || !strings.Contains(v, "REPLACE") {
			t.Errorf("Secret %s key %s: want a postgres:// placeholder marked REPLACE, got a value of %d bytes", s.Metadata.Name, key, len(v))
		}
	}

	// The Service and the PodDisruptionBudget select these pods, and the
	// Service sends to the container's port.
	labels := d.Spec.Template.Metadata.Labels
	for what, sel := range map[string]map[string]string{
		"Deployment selector": d.Spec.Selector.MatchLabels,
		"Service selector":    k.service.Spec.Selector,
		"PDB selector":        k.pdb.Spec.Selector.MatchLabels,
	} {
		if len(sel) == 0 {
			t.Errorf("%s is empty", what)
		}
		for key, v := range sel {
			if labels[key] != v {
				t.Errorf("%s %s=%s does not match the pods' labels %v", what, key, v, labels)
			}
		}
	}
	if ports := k.service.Spec.Ports; len(ports) != 1 {
		t.Errorf("Service has %d ports, want 1", len(ports))
	} else if !portMatches(ports[0].TargetPort, portName, port) {
		t.Errorf("Service targets port %q, not the container's (%s, %d)", ports[0].TargetPort.Value, portName, port)
	}

	// X-Forwarded-For is trusted from the pod network only, and only the
	// ingress controller's namespace may reach the pods, so no other pod
	// can name its own throttle key.
	trusted := env["PLANTSTORE_TRUSTED_PROXIES"]
	if trusted == "" {
		t.Error("PLANTSTORE_TRUSTED_PROXIES is not set: behind the ingress every client would share one throttle allowance")
	}
	for field := range strings.SplitSeq(trusted, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(field))
		if err != nil {
			t.Errorf("PLANTSTORE_TRUSTED_PROXIES entry %q is not a CIDR prefix", field)
			continue
		}
		if p.Bits() < 8 || !p.Addr().IsPrivate() {
			t.Errorf("PLANTSTORE_TRUSTED_PROXIES trusts %s: want a private pod network, not the internet", p)
		}
	}
	np := k.networkPolicy
	for key, v := range np.Spec.PodSelector.MatchLabels {
		if labels[key] != v {
			t.Errorf("NetworkPolicy selects %s=%s, not the pods %v", key, v, labels)
		}
	}
	if len(np.Spec.PodSelector.MatchLabels) == 0 || !slices.Contains(np.Spec.PolicyTypes, "Ingress") {
		t.Errorf("NetworkPolicy does not restrict ingress to the pods: %+v", np.Spec)
	}
	if len(np.Spec.Ingress) == 0 {
		t.Error("NetworkPolicy admits nothing; the ingress controller must reach the pods")
	}
	for _, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			t.Error("a NetworkPolicy rule admits every source")
		}
		for _, from := range rule.From {
			if from.IPBlock != nil || from.NamespaceSelector == nil || len(from.NamespaceSelector.MatchLabels) == 0 {
				t.Errorf("a NetworkPolicy rule admits %+v; want the ingress controller's namespace only", from)
			}
		}
		if len(rule.Ports) != 1 || !portMatches(rule.Ports[0].Port, portName, port) {
			t.Errorf("a NetworkPolicy rule opens ports %+v; want the API's port alone", rule.Ports)
		}
	}
}

func (s secret) hasKey(key string) bool {
	_, a := s.StringData[key]
	_, b := s.Data[key]
	return a || b
}

// kustomization.yaml lists every manifest but the Secret's, whose
// placeholder must never be applied over the real URL, and renames the
// Deployment's image.
func TestKustomization(t *testing.T) {
	var kz struct {
		Resources []string
		Images    []struct {
			Name string
		}
	}
	decodeFile(t, filepath.Join("k8s", "kustomization.yaml"), &kz)
	files, _ := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	var want []string
	for _, f := range files {
		switch filepath.Base(f) {
		case "kustomization.yaml", "secret.yaml":
		default:
			want = append(want, filepath.Base(f))
		}
	}
	got := slices.Sorted(slices.Values(kz.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v, want %v", got, want)
	}
	image := loadK8s(t).deployment.Spec.Template.Spec.Containers[0].Image
	for _, im := range kz.Images {
		if name, _, _ := strings.Cut(image, ":"); im.Name != name {
			t.Errorf("kustomization.yaml renames image %q; the Deployment runs %q", im.Name, image)
		}
	}
}

// The Dockerfile builds with deploy/build.sh, the script CI runs, and runs
// the binary as a non-root user with a health check.
func TestDockerfile(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Instructions, with continuation lines joined and comments dropped.
	var instr []string
	var cur strings.Builder
	scan := bufio.NewScanner(f)
	for scan.Scan() {
		line := strings.TrimSpace(scan.Text())
		if strings.HasPrefix(line, "#") || line == "" && cur.Len() == 0 {
			continue
		}
		if more, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(strings.TrimSpace(more) + " ")
			continue
		}
		cur.WriteString(line)
		instr = append(instr, cur.String())
		cur.Reset()
	}
	if err := scan.Err(); err != nil {
		t.Fatal(err)
	}
	var stages int
	var user, healthcheck string
	var buildScript, modulesFirst, copyAll bool
	for _, in := range instr {
		keyword, rest, _ := strings.Cut(in, " ")
		switch strings.ToUpper(keyword) {
		case "FROM":
			stages++
			user = "" // USER is per stage; the last stage's counts
		case "COPY":
			if strings.HasSuffix(rest, "go.mod go.sum ./") && !copyAll {
				modulesFirst = true
			}
			if rest == ". ." {
				copyAll = true
			}
		case "RUN":
			if strings.Contains(rest, "bash deploy/build.sh ") {
				buildScript = true
			}
		case "USER":
			user = strings.TrimSpace(rest)
		case "HEALTHCHECK":
			healthcheck = rest
		}
	}
	if stages < 2 {
		t.Errorf("%d stages; want a build stage and a runtime stage", stages)
	}
	if !buildScript {
		t.Error("no RUN bash deploy/build.sh: the image must build the way CI does")
	}
	if !modulesFirst {
		t.Error("go.mod and go.sum are not copied before the source (the module download is not a layer of its own)")
	}
	name, _, _ := strings.Cut(user, ":")
	if uid, err := strconv.Atoi(name); name == "" || name == "root" || err == nil && uid == 0 {
		t.Errorf("the runtime stage runs as %q; want a non-root user", user)
	}
	if !strings.Contains(healthcheck, `CMD ["/plantstore", "health"`) {
		t.Errorf("HEALTHCHECK %q does not run plantstore health", healthcheck)
	}
	if _, err := os.Stat("build.sh"); err != nil {
		t.Error(err)
	}
}
