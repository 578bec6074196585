defmodule KinoTrace.Agent.TmpdirTest do
  # Issue 27, item 3 and the review's held cases: where the agent puts the native
  # tracer's library on a traced node, against another user of that machine who
  # pre-creates names and races into new directories, and in a full temporary directory.
  # Another user and a file system of our own need root: elsewhere these are skipped.
  use ExUnit.Case, async: false

  @moduletag :slow

  import KinoTraceTest.Helpers, only: [await_events: 2, wait_until: 1]
  import KinoTraceTest.Peers

  alias KinoTraceTest.Remote.Echo

  @moduletag timeout: 240_000

  {uid, 0} = System.cmd("id", ["-u"])

  if String.trim(uid) != "0" do
    @moduletag skip:
                 "needs root: it runs another user (uid 65534) against the agent and mounts a small tmpfs"
  end

  # the other user
  @uid 65_534

  setup_all do
    ensure_distribution()
  end

  # A temporary directory shared by every user, as /tmp is: mode 1777.
  defp shared_tmp do
    dir = Path.join(System.tmp_dir!(), "kino_trace_shared_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    # (File.chmod/2 leaves the sticky bit out)
    {_, 0} = System.cmd("chmod", ["1777", dir])
    on_exit(fn -> File.rm_rf(dir) end)
    dir
  end

  # The other user's program: pre-creates the directory names given (`from..to` of
  # kino_trace-<ospid>-N, what the agent's names were), says "ready", then watches
  # `tmp` and, in every new kino_trace-* directory, plants a link to its own file
  # `evil` under the library's name and another name, saying "planted" when it could.
  @racer ~S"""
  use strict; use warnings;
  my ($tmp, $evil, $ospid, $from, $to) = @ARGV;
  $| = 1;
  my %pre;
  for my $k ($from .. $to) { my $n = "kino_trace-$ospid-$k"; mkdir("$tmp/$n", 0755) or die "mkdir: $!"; $pre{$n} = 1; }
  open(my $fh, '>', $evil) or die "evil: $!"; close $fh; chmod 0666, $evil;
  print "ready\n";
  my %done;
  while (1) {
    opendir(my $d, $tmp) or die "opendir: $!";
    while (my $e = readdir $d) {
      next if $pre{$e} or $done{$e} or $e !~ /^kino_trace-/;
      $done{$e} = 1;
      for my $name ("kino_trace_nif.so", "planted") {
        print "planted $e/$name\n" if symlink($evil, "$tmp/$e/$name");
      }
    }
    closedir $d;
  }
  """

  defp start_racer(tmp, evil, ospid, from, to) do
    setpriv = System.find_executable("setpriv") || flunk("setpriv is missing (util-linux)")

    port =
      Port.open({:spawn_executable, setpriv}, [
        :binary,
        :exit_status,
        {:line, 1024},
        args: [
          "--reuid=#{@uid}",
          "--regid=#{@uid}",
          "--clear-groups",
          "perl",
          "-e",
          @racer,
          tmp,
          evil,
          ospid,
          "#{from}",
          "#{to}"
        ]
      ])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    on_exit(fn -> System.cmd("kill", ["-9", "#{os_pid}"]) end)

    receive do
      {^port, {:data, {:eol, "ready"}}} -> {port, os_pid}
      {^port, {:exit_status, status}} -> flunk("the other user's program ended (#{status})")
    after
      60_000 -> flunk("the other user's program did not get ready")
    end
  end

  defp planted(port, acc \\ []) do
    receive do
      {^port, {:data, {:eol, "planted " <> what}}} -> planted(port, [what | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  test "another user can neither force the fallback nor plant the library, even at umask 0" do
    tmp = shared_tmp()
    {_peer, n, _} = bare_peer(:hostile, tmpdir: tmp, umask: 0)

    assert :erpc.call(n, :os, :cmd, [~c"umask"])
           |> List.to_string()
           |> String.trim()
           |> String.to_integer(8) == 0

    # the names the agent used to take: kino_trace-<its OS pid>-<erlang:unique_integer([positive])>
    ospid = :erpc.call(n, :os, :getpid, []) |> List.to_string()
    next = :erpc.call(n, :erlang, :unique_integer, [[:positive]])

    evil_dir =
      Path.join(System.tmp_dir!(), "kino_trace_evil_#{System.unique_integer([:positive])}")

    File.mkdir_p!(evil_dir)
    File.chown!(evil_dir, @uid)
    on_exit(fn -> File.rm_rf(evil_dir) end)
    evil = Path.join(evil_dir, "evil.so")
    {port, _} = start_racer(tmp, evil, ospid, next, next + 5_000)

    for round <- 1..5 do
      trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])

      assert Kino.Trace.info(trace).nodes[n].tracer == :native,
             "round #{round}: #{inspect(Kino.Trace.info(trace).nodes[n].tracer)}"

      :erpc.call(n, Echo, :double, [round])
      await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return and e.return == 2 * round end))
      Kino.Trace.stop(trace)
      # each round ships the library anew
      wait_until(fn -> kino_modules(n) == [] end)
    end

    got_in = planted(port)

    IO.puts(
      "\n  the other user planted #{length(got_in)} links in the agent's directories while they were new"
    )

    # nothing was ever written through its links, and nothing of the agent's is left
    assert File.stat!(evil).size == 0
    ours = for name <- File.ls!(tmp), File.lstat!(Path.join(tmp, name)).uid != @uid, do: name
    assert ours == []
  end

  test "a full temporary directory: the fallback, and why; nothing is left" do
    mnt = Path.join(System.tmp_dir!(), "kino_trace_full_#{System.unique_integer([:positive])}")
    File.mkdir_p!(mnt)
    # smaller than the native tracer's library
    {_, 0} = System.cmd("mount", ["-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", mnt])

    on_exit(fn ->
      System.cmd("umount", [mnt])
      File.rm_rf(mnt)
    end)

    assert File.stat!(Path.join(:code.priv_dir(:kino_trace), "kino_trace_nif.so")).size >
             64 * 1024

    {_peer, n, _} = bare_peer(:full_tmp, tmpdir: mnt)
    trace = Kino.Trace.calls(["KinoTraceTest.Remote.Echo.double/1"], nodes: [n])

    assert {:fallback, why} = Kino.Trace.info(trace).nodes[n].tracer

    assert why =~
             ~r"cannot write the native tracer to #{Regex.escape(mnt)}/kino_trace-[\w-]+ \(enospc\)"

    assert File.ls!(mnt) == []

    :erpc.call(n, Echo, :double, [8])
    await_events(trace, &Enum.any?(&1, fn e -> e.kind == :return and e.return == 16 end))
    Kino.Trace.stop(trace)
    assert kino_modules(n) == []
    assert File.ls!(mnt) == []
  end
end
