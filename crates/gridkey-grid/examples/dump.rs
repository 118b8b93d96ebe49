fn main() {
    for p in std::env::args().skip(1) {
        let mut r = netcdf3::FileReader::open(&p).unwrap();
        let ds = r.data_set().clone();
        println!("{p} {:?}", r.version());
        for d in ds.get_dims() { println!("  dim {} {:?} unlimited={}", d.name(), d.size(), d.is_unlimited()); }
        for v in ds.get_vars() {
            let names = v.dim_names();
            println!("  var {} {:?} {:?}", v.name(), v.data_type(), names);
        }
        for name in ["edge_of_cell","vertex_of_cell","neighbor_cell_index","adjacent_cell_of_edge","edge_vertices","edges_of_vertex","cells_of_vertex","vertices_of_vertex","edgesOnCell","verticesOnCell","cellsOnCell","cellsOnEdge","verticesOnEdge","edgesOnVertex","cellsOnVertex","nEdgesOnCell"] {
            if let Ok(x) = r.read_var_i32(name) {
                let neg = x.iter().filter(|&&v| v < 0).count();
                let zero = x.iter().filter(|&&v| v == 0).count();
                println!("  {name}: len {} min {:?} max {:?} neg {neg} zero {zero}", x.len(), x.iter().min(), x.iter().max());
            }
        }
    }
}
