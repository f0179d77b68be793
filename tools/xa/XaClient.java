/*
 * XaClient: an XA application for t/058_xa_jdbc.pl. It drives two-phase
 * commits through the PostgreSQL JDBC driver's PGXADataSource the way a
 * JTA transaction manager does (start, end, prepare, then commit or
 * rollback of the branch), each branch recording its event in the
 * business table sent and sending it with outbox_send(). The decision of
 * branch i is fixed: every 7th is rolled back after its prepare, the
 * others committed, so a recovery (a new process, as a transaction
 * manager's after its crash) decides the branches it finds in doubt the
 * same way.
 *
 * Run as a single-file program, the driver on the class path:
 *   java -cp 'LIBS/*' XaClient.java PORT USER COMMAND [FIRST COUNT TOPIC]
 * COMMAND is one of
 *   run      branches FIRST .. FIRST+COUNT-1, each prepared and decided
 *   prepare  the same branches prepared only: the client then exits, as
 *            one that crashed between prepare and commit
 *   recover  the branches of this client PostgreSQL holds prepared
 *            (XAResource.recover), decided in the order of their numbers
 * It prints one line per branch: "<i> committed" or "<i> rolled back".
 */
import java.nio.ByteBuffer;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.util.Arrays;
import java.util.Comparator;
import javax.sql.XAConnection;
import javax.transaction.xa.XAResource;
import javax.transaction.xa.Xid;
import org.postgresql.xa.PGXADataSource;

public class XaClient {
	/* this client's branches, told apart from anyone else's in recover */
	static final int FORMAT_ID = 0x4f42;

	record Branch(int i) implements Xid {
		public int getFormatId() { return FORMAT_ID; }
		public byte[] getGlobalTransactionId() { return ByteBuffer.allocate(4).putInt(i).array(); }
		public byte[] getBranchQualifier() { return new byte[] {1}; }

		static Branch of(Xid xid) {
			return new Branch(ByteBuffer.wrap(xid.getGlobalTransactionId()).getInt());
		}

		boolean commits() { return i % 7 != 0; }
	}

	public static void main(String[] args) throws Exception {
		PGXADataSource ds = new PGXADataSource();
		ds.setServerNames(new String[] {"127.0.0.1"});
		ds.setPortNumbers(new int[] {Integer.parseInt(args[0])});
		ds.setDatabaseName("postgres");
		ds.setUser(args[1]);
		XAConnection xaConn = ds.getXAConnection();
		try {
			XAResource xa = xaConn.getXAResource();
			switch (args[2]) {
				case "run", "prepare" -> {
					int first = Integer.parseInt(args[3]);
					int count = Integer.parseInt(args[4]);
					for (int i = first; i < first + count; i++) {
						Branch b = new Branch(i);
						prepare(xa, xaConn.getConnection(), b, args[5]);
						if (args[2].equals("run"))
							decide(xa, b);
					}
				}
				case "recover" -> {
					Xid[] found = xa.recover(XAResource.TMSTARTRSCAN | XAResource.TMENDRSCAN);
					Branch[] mine = Arrays.stream(found)
						.filter(x -> x.getFormatId() == FORMAT_ID)
						.map(Branch::of)
						.sorted(Comparator.comparingInt(Branch::i))
						.toArray(Branch[]::new);
					for (Branch b : mine)
						decide(xa, b);
				}
				default -> throw new IllegalArgumentException("unknown command " + args[2]);
			}
		} finally {
			xaConn.close();
		}
	}

	/* One branch's work, ended and prepared: its vote is yes. */
	static void prepare(XAResource xa, Connection conn, Branch b, String topic) throws Exception {
		String key = "k" + (b.i() % 5);
		String value = "xa:" + b.i();
		xa.start(b, XAResource.TMNOFLAGS);
		try (PreparedStatement st = conn.prepareStatement(
				"INSERT INTO sent VALUES (0, ?, ?, ?)")) {
			st.setInt(1, b.i());
			st.setString(2, key);
			st.setString(3, value);
			st.executeUpdate();
		}
		try (PreparedStatement st = conn.prepareStatement("SELECT outbox_send(?, ?::text, ?::text)")) {
			st.setString(1, topic);
			st.setString(2, value);
			st.setString(3, key);
			st.executeQuery().close();
		}
		xa.end(b, XAResource.TMSUCCESS);
		if (xa.prepare(b) != XAResource.XA_OK)
			throw new IllegalStateException("branch " + b.i() + " was read-only");
	}

	static void decide(XAResource xa, Branch b) throws Exception {
		if (b.commits()) {
			xa.commit(b, false);
			System.out.println(b.i() + " committed");
		} else {
			xa.rollback(b);
			System.out.println(b.i() + " rolled back");
		}
	}
}
