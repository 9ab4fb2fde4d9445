"""Projects: shared projects, members and their roles, missions and jobs charged to a project,
through the package."""

import datetime
import uuid

import pytest

import mission

SHELL = "99e803ea-1829-42ba-be3d-294fb6a5e640"
LOCAL_STATION = "6d697373-696f-4e00-8000-000000000002"


def test_projects_members_and_what_jobs_are_charged_to(client, tmp_path):
    me = client.whoami()
    personal = client.get_project(me.user_id)
    assert (personal.name, personal.personal, personal.role) == ("~admin", me.user_id, "manager")

    bio = client.create_project("py-bio", description="biology")
    assert (bio.name, bio.description, bio.personal, bio.role, bio.members) == ("py-bio", "biology", None, None, 0)
    assert "py-bio" in [p.name for p in client.list_projects(items=200)]
    member = client.set_project_member(bio.project_id, "admin", role="manager")
    assert (member.username, member.role) == ("admin", "manager")
    assert [(m.username, m.role) for m in client.project_members(bio.project_id)] == [("admin", "manager")]
    with pytest.raises(mission.Invalid, match="roles are viewer, member and manager"):
        client.set_project_member(bio.project_id, "admin", role="owner")
    assert client.update_project(bio.project_id, description="molecular").description == "molecular"

    src = tmp_path / "src"
    src.mkdir()
    (src / "run.sh").write_text("echo charged\n")
    made = client.create_mission("py-in-bio", mission_type_id=SHELL, settings={"filename": "run.sh"},
                                 project_id=bio.project_id)
    assert made.project_id == bio.project_id
    client.upload(made.mission_id, src, progress=False)
    job = client.run_job_on_station(made.mission_id, LOCAL_STATION)
    assert job.project_id == bio.project_id
    home = client.run_job_on_station(made.mission_id, LOCAL_STATION, project_id=me.user_id)
    assert home.project_id == me.user_id
    for started in (job, home):
        assert client.wait_for_job(started.job_id, timeout=120).status == "completed"
    with pytest.raises(mission.Invalid, match="project_id"):
        client.run_job_on_station(made.mission_id, LOCAL_STATION, project_id=uuid.uuid4())
    assert [m.mission_id for m in client.list_missions(project_ids=[bio.project_id])] == [made.mission_id]
    assert [j.job_id for j in client.list_jobs(project_ids=[bio.project_id])] == [job.job_id]

    limits = client.set_project_limits(bio.project_id, LOCAL_STATION, nominal={"cpus": 1},
                                       borrowing_limit={"cpus": 0}, max_queued_jobs=10)
    assert (limits.station_name, limits.limits["nominal"], limits.in_use.running_jobs) == ("local", {"cpus": 1}, 0)
    assert [l.limits.get("max_queued_jobs") for l in client.project_limits(bio.project_id)] == [10]
    with pytest.raises(mission.Invalid, match="share"):
        client.set_project_limits(bio.project_id, LOCAL_STATION, share=0)
    assert client.delete_project_limits(bio.project_id, LOCAL_STATION) is True
    assert client.delete_project_limits(bio.project_id, LOCAL_STATION) is False

    assert client.project_budget(bio.project_id) is None
    budget = client.set_project_budget(bio.project_id, cpu_hours=500, period="week")
    assert budget.budget == {"cpu_hours": 500.0, "period": "week"}
    assert 0 < budget.spent_cpu_hours < 0.01, "the job that ran in bio, a few milliseconds"
    assert budget.period_end is not None and budget.period_start.weekday() == 0
    with pytest.raises(mission.Invalid, match="cpu_hours"):
        client.set_project_budget(bio.project_id, cpu_hours=-1)
    assert client.project_budget(bio.project_id).budget["period"] == "week"
    # In energy and money too; the jobs of a station without prices cost nothing in EUR.
    costly = client.set_project_budget(bio.project_id, kwh=2.5, money=mission.Cost(10.0, "EUR"))
    assert (costly.budget["kwh"], costly.budget["money"]) == (2.5, {"amount": 10.0, "currency": "EUR"})
    assert costly.spent_kwh > 0 and costly.spent_money == mission.Cost(0.0, "EUR"), costly
    with pytest.raises(mission.Invalid, match="money.currency"):
        client.set_project_budget(bio.project_id, money=mission.Cost(1.0, "euro"))
    assert client.delete_project_budget(bio.project_id) is True
    assert client.delete_project_budget(bio.project_id) is False

    by_project = client.usage()
    assert [(g.group, g.jobs) for g in by_project.groups if g.id == bio.project_id] == [(bio.name, 1)]
    assert by_project.group_by == "project" and by_project.since is None
    by_user = client.usage(group_by="user", since=datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1))
    assert by_user.since is not None
    assert [g.jobs >= 2 for g in by_user.groups if g.id == me.user_id] == [True], "the two jobs run above"
    # With since, each group's use per day: today's jobs, the day they ended.
    mine = [g for g in by_user.groups if g.id == me.user_id][0]
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    assert mine.daily is not None and mine.daily[-1].day == today and mine.daily[-1].jobs >= 1, mine
    assert isinstance(mine.daily[-1], mission.UsageDay) and mine.cost is None, mine
    csv = client.usage_csv(group_by="label:none-set")
    assert csv.startswith("label:none-set,id,jobs,") and csv.splitlines()[1].startswith(",,"), csv
    with pytest.raises(mission.Invalid, match="group_by"):
        client.usage(group_by="team")

    assert client.update_mission(made.mission_id, project_id=me.user_id) is True
    assert client.get_mission_by_id(made.mission_id).project_id == me.user_id
    assert client.remove_project_member(bio.project_id, "admin") is True
    assert client.delete_project(bio.project_id) is True
    assert client.delete_project(bio.project_id) is False
    with pytest.raises(mission.NotFound):
        client.get_project(bio.project_id)


def test_audit_trail(client):
    bio = client.create_project("py-audited")
    client.set_project_budget(bio.project_id, cpu_hours=5, period="month")
    page = client.audit(project_id=bio.project_id)
    assert [e.action for e in page.entries] == ["project.budget.set", "project.create"]
    newest = page.entries[0]
    assert (newest.actor, newest.actor_role, newest.project_id) == ("admin", "admin", bio.project_id)
    assert newest.changes == {"cpu_hours": 5.0, "period": "month"}
    assert newest.request_id and newest.at.tzinfo is not None
    first = client.audit(project_id=bio.project_id, limit=1)
    assert [e.seq for e in first.entries] == [newest.seq] and first.next_before == newest.seq
    older = client.audit(project_id=bio.project_id, before=first.next_before)
    assert [e.action for e in older.entries] == ["project.create"]
    lines = client.audit_jsonl(actor="admin", project_id=bio.project_id).splitlines()
    assert len(lines) == 2 and '"project.budget.set"' in lines[0]
    with pytest.raises(mission.Invalid, match="limit"):
        client.audit(limit=5000)
