"""Drives the unmodified galileo-sdk 1.0.1 against our server; run by test_galileo.py with the
galileo virtualenv's Python (that client pins packages the test virtualenv cannot hold).

argv: server URL, admin password, a work folder. Prints one JSON object of what it saw.
"""

import json
import os
import sys
import time

from galileo_sdk import GalileoSdk

url, password, work = sys.argv[1:4]
SHELL = "99e803ea-1829-42ba-be3d-294fb6a5e640"
seen = {}

galileo = GalileoSdk(username="admin", password=password, config=url)

types = galileo.missions.list_mission_types()
seen["types"] = sorted(t.name for t in types)
seen["shell"] = galileo.missions.get_mission_type(SHELL).name
seen["settings_info"] = galileo.missions.get_mission_type_settings_info(SHELL)

mission = galileo.missions.create_mission(name="from-galileo", description="old scripts", mission_type_id=SHELL,
                                          settings={"filename": "run.sh"})
seen["created"] = {"name": mission.name, "description": mission.description, "settings": mission.settings}

inputs = os.path.join(work, "inputs")
os.makedirs(os.path.join(inputs, "sub"))
with open(os.path.join(inputs, "run.sh"), "w") as f:
    f.write('echo "args: $*"\ncat sub/data.txt\nmkdir -p out && echo result > out/r.txt\n')
with open(os.path.join(inputs, "sub", "data.txt"), "w") as f:
    f.write("nested data\n")
with open(os.path.join(inputs, "extra.txt"), "w") as f:
    f.write("to delete\n")
seen["uploaded"] = galileo.missions.upload(mission.mission_id, inputs)
seen["files"] = sorted((f.path, f.filename) for f in galileo.missions.get_mission_files(mission.mission_id))
seen["deleted"] = galileo.missions.delete_file(mission.mission_id, "extra.txt")
seen["files_after"] = sorted((f.path, f.filename) for f in galileo.missions.get_mission_files(mission.mission_id))
galileo.missions.update_mission_args(mission.mission_id, ["one", "two"])
seen["updated"] = galileo.missions.update_mission(mission.mission_id, description="changed")
again = galileo.missions.get_mission_by_id(mission.mission_id)
seen["read_back"] = {"description": again.description, "settings": again.settings}
seen["listed"] = [m.name for m in galileo.missions.list_missions(names=["from-galileo"])]

station = galileo.stations.list_stations(names=["local"])[0]
job = galileo.missions.run_job_on_station(mission.mission_id, station.station_id)
deadline = time.monotonic() + 120
while True:
    [current] = galileo.jobs.list_jobs(job_ids=[job.job_id])
    if current.status in ("completed", "error", "stopped", "removed_by_host") or time.monotonic() > deadline:
        break
    time.sleep(0.3)
seen["status"] = current.status
seen["history"] = [s.status.name for s in current.status_history]
seen["logs"] = galileo.jobs.request_logs_from_job(job.job_id)
results = os.path.join(work, "results")
galileo.jobs.download_and_extract_job_results(job.job_id, results)
extracted = {}
for folder, _, names in os.walk(results):
    for name in names:
        path = os.path.join(folder, name)
        if not name.endswith(".zip"):
            with open(path) as f:
                extracted[os.path.relpath(path, results)] = f.read()
seen["extracted"] = extracted
seen["mission_deleted"] = galileo.missions.delete_mission_by_id(mission.mission_id) is not None
print(json.dumps(seen))
