#!/usr/bin/env python3
"""An S3-compatible server for the tests: moto in server mode, with authentication on.

Listens on 127.0.0.1 on a free port, creates a bucket and an IAM user whose access key may use
it, prints one JSON line {"endpoint", "region", "bucket", "access_key_id", "secret_access_key"}
and serves until its standard input closes (the test that started it ended or was killed).
Requests signed with any other key get InvalidAccessKeyId / SignatureDoesNotMatch, as from S3.
"""
import json
import os
import sys

# The first actions run unauthenticated (they create the user and its key); every later request
# must be signed with a key moto knows. Must be set before moto is imported.
SETUP_ACTIONS = 4
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(SETUP_ACTIONS)
os.environ.setdefault("AWS_ACCESS_KEY_ID", "setup")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "setup")

import boto3  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

REGION = "us-east-1"
BUCKET = "mission-test"

server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
endpoint = f"http://{host}:{port}"

iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION)
iam.create_user(UserName="mission")
key = iam.create_access_key(UserName="mission")["AccessKey"]
iam.put_user_policy(
    UserName="mission",
    PolicyName="all",
    PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    ),
)
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    region_name=REGION,
    aws_access_key_id=key["AccessKeyId"],
    aws_secret_access_key=key["SecretAccessKey"],
)
s3.create_bucket(Bucket=BUCKET)

print(
    json.dumps(
        {
            "endpoint": endpoint,
            "region": REGION,
            "bucket": BUCKET,
            "access_key_id": key["AccessKeyId"],
            "secret_access_key": key["SecretAccessKey"],
        }
    ),
    flush=True,
)
sys.stdin.read()
server.stop()
