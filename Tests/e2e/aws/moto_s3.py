"""A real S3 implementation that checks SigV4 signatures, for the aws-sigv4 tests: `moto` (PyPI, `moto[server]`) in
server mode on 127.0.0.1 with IAM enforcement on (`INITIAL_NO_AUTH_ACTION_COUNT`).

The first three requests run without authentication and create an IAM user, its access key and an inline user
policy (`put_user_policy`: moto loads no AWS managed policies); every later request, the fixture's own setup included,
is signed and verified — a wrong signature is a 403 `SignatureDoesNotMatch`, as on AWS.
"""

import os
import socket
import subprocess
import sys
import time

import boto3
from botocore.config import Config

ALLOW_ALL = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'
ALLOW_S3 = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}'
TRUST_WEB_IDENTITY = (
    '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":'
    '"arn:aws:iam::123456789012:oidc-provider/oidc.example"},"Action":"sts:AssumeRoleWithWebIdentity"}]}')
REGION = "us-east-1"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def moto_available():
    try:
        import moto.server  # noqa: F401
        import flask  # noqa: F401
        return True
    except ImportError:
        return False


class MotoS3:
    """`start()` runs moto and creates the user, key, policy and bucket; `client(service)` is a boto3 client signed
    with the user's key (path-style URLs, like the proxy tests use)."""

    def __init__(self, log_path, bucket="cogs"):
        self.log_path = log_path
        self.bucket = bucket
        self.port = None
        self.proc = None
        self.access_key_id = None
        self.secret_access_key = None

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self, timeout=30.0):
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("AWS_")}
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        for _ in range(3):
            self.port = _free_port()
            self._log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                env=env, stdout=self._log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            if self.proc.poll() is None:
                break
            self._log.close()
        else:
            raise RuntimeError("moto did not start: " + open(self.log_path, errors="replace").read()[-2000:])
        # The three unauthenticated actions.
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION,
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="cog-admin")
        key = iam.create_access_key(UserName="cog-admin")["AccessKey"]
        iam.put_user_policy(UserName="cog-admin", PolicyName="all", PolicyDocument=ALLOW_ALL)
        self.access_key_id = key["AccessKeyId"]
        self.secret_access_key = key["SecretAccessKey"]
        # From here on every request is verified.
        self.client("s3").create_bucket(Bucket=self.bucket)
        return self

    def client(self, service):
        return boto3.client(
            service, endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def create_web_identity_role(self, name="cog-reader"):
        """A role web identities may assume, allowed everything on S3 (an inline role policy); its ARN."""
        iam = self.client("iam")
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=TRUST_WEB_IDENTITY)["Role"]["Arn"]
        iam.put_role_policy(RoleName=name, PolicyName="s3", PolicyDocument=ALLOW_S3)
        return arn

    def put(self, key, data):
        self.client("s3").put_object(Bucket=self.bucket, Key=key, Body=data)

    def get(self, key):
        return self.client("s3").get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc:
            self._log.close()
