def test_create_then_list(corral):
    created = corral.json("create", "Fix the login timeout")
    assert created["task"]["status"] == "backlog"
    rows = corral.json("list")["tasks"]
    assert [r["ref"] for r in rows] == [created["task"]["ref"]]
