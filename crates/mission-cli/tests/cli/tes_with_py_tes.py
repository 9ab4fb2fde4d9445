"""py-tes, unchanged from PyPI, drives the service's GA4GH TES API as its users do.

Run by the `tes` tests with the test venv's Python, which has py-tes and boto3. Arguments (as
JSON on standard input): the service's URL, a bearer token, the URL of a web server on
127.0.0.1 serving /hello.txt, and the S3 test server's endpoint, region, bucket and keys (an S3
cargo bay of the token's user reaches the bucket). Exits non-zero, saying why, on any mismatch.
"""

import json
import sys
import time

import boto3
import tes


def main() -> None:
    given = json.load(sys.stdin)
    client = tes.HTTPClient(given["url"], token=given["token"], timeout=30)
    s3 = boto3.client(
        "s3",
        endpoint_url=given["endpoint"],
        region_name=given["region"],
        aws_access_key_id=given["access_key_id"],
        aws_secret_access_key=given["secret_access_key"],
    )
    bucket = given["bucket"]
    s3.put_object(Bucket=bucket, Key="py-tes/in.txt", Body=b"from s3\n")

    info = client.get_service_info()
    assert info.type["artifact"] == "tes", info

    # An inline input, a web input and an S3 input; two executors sharing a volume; a
    # directory output to S3.
    task = tes.Task(
        name="py-tes two steps",
        inputs=[
            tes.Input(path="/data/in.txt", content="inline\n"),
            tes.Input(path="/data/web.txt", url=given["web"] + "/hello.txt"),
            tes.Input(path="/data/s3.txt", url=f"s3://{bucket}/py-tes/in.txt"),
        ],
        outputs=[tes.Output(path="/out/dir", url=f"s3://{bucket}/py-tes/out", type="DIRECTORY")],
        volumes=["/vol"],
        executors=[
            tes.Executor(image="debian", command=["sh", "-c", "cat /data/in.txt /data/web.txt /data/s3.txt > /vol/all"]),
            tes.Executor(
                image="debian",
                command=["sh", "-c", "mkdir -p /out/dir && cp /vol/all /out/dir/all.txt && echo b > /out/dir/b.txt"],
            ),
        ],
    )
    task_id = client.create_task(task)
    ended = client.wait(task_id, timeout=180)
    assert ended.state == "COMPLETE", client.get_task(task_id, view="FULL")
    full = client.get_task(task_id, view="FULL")
    assert [log.exit_code for log in full.logs[0].logs] == [0, 0], full
    stored = sorted(output.url for output in full.logs[0].outputs)
    assert stored == [f"s3://{bucket}/py-tes/out/all.txt", f"s3://{bucket}/py-tes/out/b.txt"], stored
    body = s3.get_object(Bucket=bucket, Key="py-tes/out/all.txt")["Body"].read()
    assert body == b"inline\nhello from the web\nfrom s3\n", body

    # The three views, and a page at a time.
    minimal = client.get_task(task_id, view="MINIMAL")
    assert (minimal.id, minimal.state, minimal.executors) == (task_id, "COMPLETE", []), minimal
    basic = client.get_task(task_id, view="BASIC")
    assert basic.inputs[0].content is None and basic.executors, basic
    assert full.inputs[0].content == "inline\n", full
    second = client.create_task(tes.Task(name="py-tes second", executors=[tes.Executor(image="debian", command=["true"])]))
    client.wait(second, timeout=180)
    first_page = client.list_tasks(view="BASIC", page_size=1)
    assert [t.id for t in first_page.tasks] == [second], first_page
    rest = client.list_tasks(view="MINIMAL", page_size=100, page_token=first_page.next_page_token)
    assert task_id in [t.id for t in rest.tasks], rest

    # Cancelled while it runs.
    long = client.create_task(tes.Task(executors=[tes.Executor(image="debian", command=["sleep", "300"])]))
    deadline = time.monotonic() + 120
    while client.get_task(long).state != "RUNNING":
        assert time.monotonic() < deadline, "the task never ran"
        time.sleep(0.2)
    client.cancel_task(long)
    while client.get_task(long).state not in ("CANCELED",):
        assert time.monotonic() < deadline, client.get_task(long, view="FULL")
        time.sleep(0.2)
    print("py-tes: all checks passed")


if __name__ == "__main__":
    main()
