"""The one redaction policy (forensics/redact.py) on real values: the manifest's sentence states every
rule from the constants the code uses, one URL policy serves a Prometheus source and a presigned upload
URL, and a redacted containerd config.toml still parses and is still read."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from collectors import runtime_config as rc
from forensics import redact, redact_config


def test_the_description_lists_each_rule_from_its_constants():
    text = redact.description(True)
    for _name, what in redact.RULES:
        assert what in text
    for word in (*redact.ENV_KEPT, *redact.CRED_WORDS, *redact.K8S_ANNOTATIONS, *redact.AUTH_SCHEMES,
                 *redact.ASSIGN_WORDS, *redact.TOML_FILE_KEYS, redact.CDI_PREFIX, redact.LAST_APPLIED):
        assert word in text, word
    assert {n for n, _ in redact.RULES} >= {"env", "annotations", "args", "text", "urls", "config"}
    assert redact.description(False) == "nothing: --no-redact was given"


def test_the_env_allowlist_is_built_from_its_names():
    assert redact.env_kept("NVIDIA_VISIBLE_DEVICES") and redact.env_kept("KUBERNETES_SERVICE_PORT_HTTPS")
    assert redact.env_kept("NVIDIA_CDI_HOOK_PATH") and redact.env_kept("MIG_STRATEGY")
    assert not redact.env_kept("PATH\n") and not redact.env_kept("NVIDIA_API_KEY")
    assert not redact.env_kept("CUDA_AUTH_TOKEN") and not redact.env_kept("DB_PASSWORD")
    assert not redact.env_kept(None)


def test_one_url_policy_for_a_prometheus_source_and_an_upload_destination():
    prom = "https://grafana:s3cret-pw@prom.monitoring.example:9090/prometheus?token=tok-88aa"
    assert redact.redact_url(prom) == "https://prom.monitoring.example:9090/prometheus?<redacted>"
    presigned = ("https://evidence.s3.us-east-1.amazonaws.com/case-4711/bundle.tar.gz?X-Amz-Algorithm="
                 "AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261201%2Fus-east-1%2Fs3"
                 "&X-Amz-Expires=3600&X-Amz-Signature=fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024")
    assert redact.redact_url(presigned, keep_names=True, mark=redact.WORD_MARK) == (
        "https://evidence.s3.us-east-1.amazonaws.com/case-4711/bundle.tar.gz?X-Amz-Algorithm=REDACTED"
        "&X-Amz-Credential=REDACTED&X-Amz-Expires=REDACTED&X-Amz-Signature=REDACTED")
    # the same policy, names kept, on the Prometheus URL: user and query names stay
    assert redact.redact_url(prom, keep_names=True) == \
        "https://grafana:<redacted>@prom.monitoring.example:9090/prometheus?token=<redacted>"
    # a bare query part and a fragment are values too; a URL urlsplit cannot read is hidden whole
    assert redact.redact_url("https://h/a?tok-88aa#access_token=x", keep_names=True) == \
        "https://h/a?<redacted>#<redacted>"
    assert redact.redact_url("http://prom:99999x/") == "<redacted>"
    assert redact.redact_url("prom.example:9090") == "<redacted>"


def test_the_command_line_and_upload_messages_use_the_same_url_policy():
    argv = ["gpu-forensics", "run", "--prometheus", "https://grafana:s3cret-pw@prom:9090/?token=tok-88aa",
            "--upload-url", "https://drop.example/up?sig=abcdef123"]
    out = redact.redact_argv(argv)
    assert out[3] == "https://<redacted>@prom:9090/?token=<redacted>"
    assert out[5] == "https://drop.example/up?sig=<redacted>"
    secrets = redact.url_secrets("https://user:pw-4711@drop.example/up?sig=abcdef123&n=1")
    assert {"pw-4711", "abcdef123"} <= set(secrets) and "1" not in secrets
    msg = "HTTP 403: bad sig abcdef123 for Bearer tok-88aa-zz"
    assert redact.scrub(msg, secrets + redact.secret_parts("Bearer tok-88aa-zz"), redact.WORD_MARK) == \
        "HTTP 403: bad sig REDACTED for REDACTED"


CONTAINERD = '''version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"
    SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://mirror:m1rr0r-pw@mirror.example.com"]

[plugins."io.containerd.grpc.v1.cri".registry.configs."nvcr.io".auth]
  username = "$oauthtoken"
  password = "nvapi-planted-9f8e7d6c5b4a"
  identitytoken = 'idt-planted-1234'

[plugins."io.containerd.grpc.v1.cri".registry.configs."nvcr.io".tls]
  key_file = "/etc/containerd/certs/nvcr.key"
'''


def test_a_redacted_containerd_toml_still_parses_and_is_still_read():
    out = redact_config.redact_toml(CONTAINERD)
    for planted in ("nvapi-planted-9f8e7d6c5b4a", "idt-planted-1234", "m1rr0r-pw"):
        assert planted not in out
    doc = tomllib.loads(out)
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    auth = cri["registry"]["configs"]["nvcr.io"]["auth"]
    assert auth["password"] == redact.redacted("nvapi-planted-9f8e7d6c5b4a")  # the string's text is hashed
    assert auth["identitytoken"] == redact.redacted("idt-planted-1234")
    assert auth["username"] == "$oauthtoken"
    assert cri["registry"]["configs"]["nvcr.io"]["tls"]["key_file"] == "/etc/containerd/certs/nvcr.key"
    assert cri["registry"]["mirrors"]["docker.io"]["endpoint"] == ["https://<redacted>@mirror.example.com"]
    assert rc.containerd_settings([doc])["runtimes"]["nvidia"]["SystemdCgroup"] is True  # still read
    assert out.count("\n") == CONTAINERD.count("\n")


def test_kubernetes_answers_apply_the_same_rules():
    from collectors import kube
    pod = {"metadata": {"annotations": {redact.LAST_APPLIED: '{"spec": 1}', "vault.example/agent-token": "t-9",
                                        "example.com/team": "ml"}, "managedFields": [{}]},
           "spec": {"containers": [{"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                                            {"name": "HF_TOKEN", "value": "hf-planted"}],
                                    "command": ["sh", "-c", "curl -H 'Authorization: Bearer tk-planted' x"]}]},
           "status": {"message": "pull https://u:pw-planted@reg.example/x failed; API_KEY=ak-planted"}}
    red = kube.redact(pod)
    text = repr(red)
    for planted in ("t-9", "hf-planted", "tk-planted", "pw-planted", "ak-planted", '{"spec": 1}'):
        assert planted not in text
    assert red["metadata"]["annotations"]["example.com/team"] == "ml" and "managedFields" not in red["metadata"]
    assert red["spec"]["containers"][0]["env"][0] == {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}


def test_a_redacted_value_is_recognised():
    assert redact.is_redacted(redact.redacted("x")) and redact.is_redacted("<redacted>")
    assert redact.is_redacted(redact.WORD_MARK) and redact.is_redacted("****")
    assert not redact.is_redacted("all") and not redact.is_redacted("compute,utility")


def test_the_shapes_import_no_http_client_yet_a_plugin_still_reaches_the_real_requests():
    """detect-secrets' plugins import requests for their network check, which redaction never runs:
    importing the policy (what collect and analyze do) leaves requests and urllib3 out of the process;
    a plugin's ``requests`` still reads through to the real module, and a later ``import requests`` is
    the real one."""
    import subprocess
    import sys
    code = ("import sys; from forensics import redact; from reports import render; "
            "print(sorted(m for m in ('requests', 'urllib3', 'idna') if m in sys.modules)); "
            "import detect_secrets.plugins.base as b; import requests; "
            "print(b.requests.exceptions.RequestException is requests.exceptions.RequestException, "
            "requests.get.__module__, redact.redact_text('AKIAIOSFODNN7EXAMPLE')[:9])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["[]", "True requests.api <redacted"]


def test_the_plugins_are_imported_at_the_first_text_with_a_marker_only():
    """analyze redacts nothing (its bundle's text was redacted when collected): it must not hold
    detect-secrets' plugins (issue 30's memory). A text with a marker imports them, and is redacted."""
    code = ("import sys; import forensics.redact as r, forensics.ops.pipeline, reports.render; "
            "print('detect_secrets' in sys.modules); print(r.redact_text('no secret here, node3 ready')); "
            "print('detect_secrets' in sys.modules); print(r.redact_text('x ghp_' + 'a' * 36)); "
            "print('detect_secrets' in sys.modules, 'requests' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.splitlines()
    assert out[:3] == ["False", "no secret here, node3 ready", "False"]
    assert out[3].startswith("x <redacted hmac:") and "ghp_" not in out[3]
    assert out[4] == "True False"  # the plugins, without the network client their verification would use
